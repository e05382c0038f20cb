"""StableHLO and profiled-graph front ends: artifact -> OpGraph."""
