"""SPMD sharding: the ``sharding`` solver (baselines, then the IP over every logical mesh) and the
``data-parallel`` / ``fsdp`` / ``megatron`` baselines. The model they search is :mod:`planmap.sharding`."""
