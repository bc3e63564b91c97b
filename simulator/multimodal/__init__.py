"""Multimodal training (DistMM, Huang et al., NSDI'24): named submodules with plans of their own, composed from
the single-stack engine (:func:`simulator.schedule.simulate_step`, :func:`simulator.memory.estimate_memory`).
docs/multimodal.md describes the model, the formulas and their sources."""
