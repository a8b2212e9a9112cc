"""How runs are specified and executed: presets (and, beside them, grids and sweeps)."""
