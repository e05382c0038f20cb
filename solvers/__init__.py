"""Solvers: one module per method, found through the registry (see :func:`get`)."""
