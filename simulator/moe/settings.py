"""The MoE cost model's view of the scenario's ``moe:`` section (:class:`~simulator.implementation.MoeSettings`):
:func:`comm_settings`."""

from __future__ import annotations

from simulator.errors import UserError
from simulator.implementation.moe_backends import MoeBackend, moe_backend
from simulator.implementation.moe_settings import DEFAULT_MOE_SETTINGS, MoeSettings, transport_problem
from simulator.moe.backends import CommSettings

__all__ = ["DEFAULT_MOE_SETTINGS", "MoeSettings", "comm_settings", "transport_problem"]


def comm_settings(settings: MoeSettings, default_dispatch_dtype: str = "bf16", backend: MoeBackend | None = None
                  ) -> CommSettings:
    """The :class:`CommSettings` of the ``moe:`` ``settings`` run by ``backend`` (the plan's, ``ResolvedPlan.moe_backend``;
    default: ``settings.backend``); ``dispatch_dtype: null`` takes ``default_dispatch_dtype`` (the plan's precision
    recipe: fp8 dispatch with the fp8 recipe). Other ``null`` fields take the backend defaults
    (:mod:`simulator.moe.backends`), except ``overlap``: a training step runs dispatch, experts and combine one
    after another whatever the backend (the ``overlap`` field)."""
    backend = moe_backend(settings.backend) if backend is None else backend
    problem = backend.transport_problem(settings.transport)
    if problem:
        raise UserError(problem, key_path="moe.transport")
    dtype = settings.dispatch_dtype or default_dispatch_dtype
    return CommSettings(backend=backend.comm_name, transport=settings.transport, qps=settings.qps, dispatch_dtype=dtype,
                        overlap=settings.overlap or "sequential")
