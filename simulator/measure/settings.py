"""What each named NCCL setting forces, and the message sizes a sweep covers."""

from __future__ import annotations

from simulator.errors import UserError
from simulator.units import GiB

#: setting name -> NCCL environment it forces (docs/interface.md `calibrate`: the setting says which NCCL
#: variables a run forced). NVLink multicast (NVLS) stays off unless the ``nvls`` setting is asked for by name.
SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "ring": {"NCCL_ALGO": "Ring"},
    "tree": {"NCCL_ALGO": "Tree"},
    "ll": {"NCCL_PROTO": "LL"},
    "ll128": {"NCCL_PROTO": "LL128"},
    "simple": {"NCCL_PROTO": "Simple"},
    "shm": {"NCCL_P2P_DISABLE": "1"},
    "nvls": {"NCCL_ALGO": "NVLS", "NCCL_NVLS_ENABLE": "1"},
}
#: operations NCCL can run under a forced algorithm (Tree implements all_reduce only; p2p ignores NCCL_ALGO)
SETTING_OPS: dict[str, tuple[str, ...]] = {"tree": ("all_reduce",), "nvls": ("all_reduce", "all_gather",
                                                                          "reduce_scatter")}
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "sendrecv")
DEFAULT_SETTINGS = ("default", "ring", "tree", "ll", "ll128", "simple")


def setting_env(setting: str) -> dict[str, str]:
    """The environment of a setting, with NVLS disabled unless the setting is ``nvls``."""
    if setting not in SETTINGS:
        raise UserError(f"unknown NCCL setting {setting!r}; known: {', '.join(SETTINGS)}")
    env = {"NCCL_NVLS_ENABLE": "0"}
    env.update(SETTINGS[setting])
    return env


def ops_for(setting: str, ops: tuple[str, ...]) -> tuple[str, ...]:
    """The requested operations that NCCL can run under ``setting``."""
    allowed = SETTING_OPS.get(setting)
    return tuple(op for op in ops if allowed is None or op in allowed)


def sweep_sizes(min_bytes: int = 256, max_bytes: int = GiB, factor: int = 4) -> list[int]:
    """Sizes from ``min_bytes`` to ``max_bytes`` multiplying by ``factor`` (nccl-tests ``-b -e -f``)."""
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise UserError(f"size sweep needs 0 < min <= max and factor >= 2, got {min_bytes}, {max_bytes}, {factor}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes
