"""The planner service: `yeto shape`'s catalog, memory model and exact solver."""
