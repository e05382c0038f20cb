"""The sharding model (issue 12, layer 2): logical meshes, specs, per-op strategies, resharding costs,
memory, SPMD evaluation and the default layout. Core: imports numpy and planmap core modules only;
the IP that searches this space lives in ``planmap.solvers.sharding``. See the design contract in the
module docs of :mod:`planmap.sharding.tables` and :mod:`planmap.sharding.spmd`.
"""

from planmap.sharding.mesh import COLLECTIVES, LogicalMesh, logical_meshes
from planmap.sharding.reshard import ReshardCache, reshard_collectives, reshard_matrix
from planmap.sharding.specs import (
    Spec,
    from_assignment,
    from_partition_spec,
    is_valid,
    partition_spec,
    replicated,
    shards,
    to_assignment,
    valid_specs,
)
from planmap.sharding.spmd import SpmdEvaluation, compress, evaluate_spmd, propagate, tables_for
from planmap.sharding.strategies import Strategy, StrategySet, enumerate_strategies
from planmap.sharding.tables import ShardingTables

__all__ = [
    "COLLECTIVES", "LogicalMesh", "logical_meshes", "ReshardCache", "reshard_collectives", "reshard_matrix",
    "Spec", "from_assignment", "from_partition_spec", "is_valid", "partition_spec", "replicated", "shards",
    "to_assignment", "valid_specs", "SpmdEvaluation", "compress", "evaluate_spmd", "propagate", "tables_for",
    "Strategy", "StrategySet", "enumerate_strategies", "ShardingTables",
]
