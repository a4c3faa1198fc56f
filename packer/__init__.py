"""Placement of heterogeneous task slots onto TaskManagers. Pure: no I/O."""
