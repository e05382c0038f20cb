"""The sharding search: an integer program over per-op strategies on logical device meshes."""
