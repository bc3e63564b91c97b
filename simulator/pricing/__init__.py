"""Seconds for a rank's work: communication on the placement its rank group occupies (collectives and MoE
dispatch/combine, :class:`GroupTimer`), the MoE layer on its EP group (:mod:`simulator.pricing.moe_layer`) and the
overlap coefficients that say how much of a call hides behind compute (:mod:`simulator.pricing.overlap`).

Schedule, serving and multimodal all import this package; it imports the cost models below it (collectives, MoE,
compute, topology) and the plan.
"""

from simulator.pricing.groups import GroupTimer, OpTiming

__all__ = ["GroupTimer", "OpTiming"]
