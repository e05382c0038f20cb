"""SPMD sharding: the ``sharding`` solver (baselines, then the integer program over per-op strategies on
every logical mesh) and the ``data-parallel`` / ``fsdp`` / ``megatron`` baselines. The model they search is
:mod:`planmap.sharding`."""
