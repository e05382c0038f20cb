"""Applies plans to StableHLO artifacts with JAX sharding."""
