"""Find and load hardware profiles (YAML under ``hardware_profiles/``), with located errors.

Profiles are looked up by name in any directories listed in the ``SIMULATOR_PROFILE_PATH`` environment variable,
then in ``gpus/`` and ``nodes/`` of the shipped ``hardware_profiles`` (package data, the repository's top-level
folder in a checkout: ``simulator.resources``); a path to a YAML file works too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from simulator.caching import memo
from simulator.errors import UserError
from simulator.hardware.cluster import ClusterSpec
from simulator.hardware.gpu import GpuSpec
from simulator.hardware.node import FabricSpec, NodeSpec
from simulator.resources import profile_root
from simulator.yamlio import LocatedYaml, is_file, read_yaml, validation_error_to_user_error

PROFILE_ROOT = profile_root()


def profile_dirs(kind: str) -> list[Path]:
    """Directories searched for profiles of ``kind`` (``gpus`` or ``nodes``), in order."""
    extra = [Path(p) / kind for p in os.environ.get("SIMULATOR_PROFILE_PATH", "").split(os.pathsep) if p]
    return [*extra, PROFILE_ROOT / kind]


def list_profiles(kind: str) -> list[str]:
    """Names of the available profiles of ``kind``."""
    names = {p.stem for d in profile_dirs(kind) if d.is_dir() for p in d.glob("*.yaml")}
    return sorted(names)


def _find(kind: str, name: str) -> Path:
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml"):
        if is_file(candidate):
            return candidate
        raise UserError("profile file not found", file=name)
    for directory in profile_dirs(kind):
        path = directory / f"{name}.yaml"
        if is_file(path):
            return path
    singular = kind.rstrip("s")
    raise UserError(f"unknown {singular} profile {name!r}; known: {', '.join(list_profiles(kind))}")


def _validate(model: type, data: Any, located: LocatedYaml, key_prefix: str | None = None):
    if not isinstance(data, dict):
        raise UserError(f"expected a mapping, got {type(data).__name__}", file=located.file, key_path=key_prefix)
    try:
        return model(**data)
    except ValidationError as exc:
        raise validation_error_to_user_error(exc, file=located.file, located=located, key_prefix=key_prefix) \
            from None


@memo(maxsize=64, loaded=True)
def load_gpu(name: str) -> GpuSpec:
    """Load a GPU profile by name (``h100_sxm5``) or path."""
    located = read_yaml(_find("gpus", name))
    return _validate(GpuSpec, located.data, located)


@memo(maxsize=64, loaded=True)
def load_node(name: str) -> NodeSpec:
    """Load a node profile by name (``dgx_a100_80gb``) or path; its ``gpu:`` may name a GPU profile."""
    located = read_yaml(_find("nodes", name))
    data = located.data
    if isinstance(data, dict) and isinstance(data.get("gpu"), str):
        try:
            data = {**data, "gpu": load_gpu(data["gpu"])}
        except UserError as exc:
            raise exc.located(file=located.file, key_prefix="gpu", line=located.line_of("gpu")) from None
    return _validate(NodeSpec, data, located)


def load_cluster(name: str, nodes: int = 1, fabric: dict | FabricSpec | None = None,
                 domain_nodes: int | None = None) -> ClusterSpec:
    """A cluster of ``nodes`` copies of node profile ``name`` over ``fabric`` (default: the profile's fabric).

    ``domain_nodes``: use that many nodes of each multi-node NVLink domain (16 of a GB200 NVL72 rack's 18 trays);
    ``nodes`` then counts the nodes in use (32 = two racks of 16)."""
    node = load_node(name)
    if domain_nodes is not None:
        node = used_domain(node, domain_nodes)
    try:
        return ClusterSpec(node=node, nodes=nodes, fabric=fabric)
    except ValidationError as exc:
        raise validation_error_to_user_error(exc, key_prefix="system") from None


def used_domain(node: NodeSpec, nodes: int) -> NodeSpec:
    """``node`` with ``nodes`` of each multi-node NVLink domain in use (the rest idle): the job's domains are that
    many nodes wide, every GPU keeping its links to the domain's switches."""
    domain = node.nvlink_domain
    key = "system.nvlink_domain_nodes"
    if domain is None:
        raise UserError(f"node profile {node.name} has no multi-node NVLink domain (its NVLink domain is the node)",
                        key_path=key)
    if not 2 <= nodes <= domain.nodes:
        raise UserError(f"{nodes} nodes per NVLink domain: a {node.name} domain has 2 to {domain.nodes}", key_path=key)
    return node.model_copy(update={"nvlink_domain": domain.model_copy(update={"nodes": nodes})})


def _looks_like_node(data: Any) -> bool:
    """A file is read as a node profile when more of its keys are node fields than GPU fields (a misspelled key
    must not turn a node file into a GPU profile and an error about GPU keys)."""
    if not isinstance(data, dict):
        return False
    keys = set(data)
    node, gpu = set(NodeSpec.model_fields) - {"name", "source"}, set(GpuSpec.model_fields) - {"name", "source"}
    return len(keys & node) >= len(keys & gpu)


def load_profile(name: str) -> GpuSpec | NodeSpec:
    """A node or GPU profile by name, or a YAML file of either kind (a node file has a ``gpus:`` count)."""
    if Path(name).suffix in (".yaml", ".yml"):
        data = read_yaml(_find("nodes", name)).data
        return load_node(name) if _looks_like_node(data) else load_gpu(name)
    if name in list_profiles("nodes"):
        return load_node(name)
    if name in list_profiles("gpus"):
        return load_gpu(name)
    known = ", ".join(list_profiles("nodes") + list_profiles("gpus"))
    raise UserError(f"unknown hardware profile {name!r}; known: {known}")
