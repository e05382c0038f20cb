import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planmap.sharding import LogicalMesh, ShardingTables, compress, evaluate_spmd, from_assignment, propagate
from tests.sharding.graphs import mlp, topology

R, A0 = ((), ()), ((0,), ())
COL = ((), (0,))


def _tables(batch, d, hidden, *, train):
    topo = topology("h100-1x8")
    g = mlp(batch, d, hidden, train=train)
    return ShardingTables.build(g, topo, LogicalMesh.build(topo, (4,), range(4)),
                                mode="training" if train else "inference", optimizer="sgd")


def _layouts(train):
    """Value ids: x=0 W1=1 W2=2 (dy=3); forward h, r, y; backward dW2, dr, dh, dW1, dx."""
    if not train:
        return {0: A0, 1: R, 2: R, 3: A0, 4: A0, 5: A0}, {0: R, 1: COL, 2: A0, 3: COL, 4: COL, 5: R}
    dp = {0: A0, 1: R, 2: R, 3: A0, 4: A0, 5: A0, 6: A0, 7: R, 8: A0, 9: A0, 10: R, 11: A0}
    meg = {0: R, 1: COL, 2: A0, 3: R, 4: COL, 5: COL, 6: R, 7: A0, 8: COL, 9: COL, 10: COL, 11: R}
    return dp, meg


def test_megatron_forward_is_one_all_reduce_of_the_output_and_quarters_the_weights():
    b, d, h = 64, 1024, 512
    t = _tables(b, d, h, train=False)
    dp_specs, meg_specs = _layouts(False)
    dp, meg = evaluate_spmd(t, dp_specs), evaluate_spmd(t, meg_specs)
    assert dp.collectives == () and dp.comm == 0 and dp.reshard == 0
    assert meg.collectives == (("all-reduce", (0,), b * d * 4, 1),) and meg.reshard == 0
    assert meg.comm == pytest.approx(t.topology.allreduce_time(b * d * 4, range(4)))
    weights = 2 * d * h * 4
    assert dp.memory_parts["params"] == weights and meg.memory_parts["params"] == weights / 4
    assert dp.memory_parts["data"] == b * d * 4 / 4 and meg.memory_parts["data"] == b * d * 4
    assert dp.step_time == pytest.approx(dp.compute) and dp.feasible


@pytest.mark.parametrize("batch,hidden,winner", [(256, 32, "dp"), (32, 256, "megatron")])
def test_data_parallel_vs_megatron_training_ordering_flips(batch, hidden, winner):
    d = 8192
    t = _tables(batch, d, hidden, train=True)
    dp_specs, meg_specs = _layouts(True)
    dp, meg = evaluate_spmd(t, dp_specs), evaluate_spmd(t, meg_specs)
    assert (dp.step_time < meg.step_time) == (winner == "dp")
    # the winner runs as designed: data parallel all-reduces the two weight gradients, Megatron the
    # forward output y and the backward input gradient dx (as XLA would: partial sums all-reduced,
    # never an operand gathered along the dim an op reduces)
    if winner == "dp":
        assert dp.collectives == (("all-reduce", (0,), hidden * d * 4, 2),) and dp.reshard == 0
    else:
        assert meg.collectives == (("all-reduce", (0,), batch * d * 4, 2),) and meg.reshard == 0
    loser = meg if winner == "dp" else dp
    assert loser.count("all-reduce") + loser.count("all-gather") > 0
    # training memory: sgd keeps weights + gradients; Megatron splits both
    weights = 2 * d * hidden * 4
    assert dp.memory_parts["params"] == 2 * weights and meg.memory_parts["params"] == 2 * weights / 4
    stash = batch * hidden * 4 * 2  # h and relu(h)
    assert dp.memory_parts["stash"] == stash / 4 and meg.memory_parts["stash"] == stash / 4


def test_propagation_from_the_data_argument_is_data_parallel():
    t = _tables(256, 1024, 32, train=False)
    specs = propagate(t, {0: A0})
    assert [specs[v] for v in (3, 4, 5)] == [A0, A0, A0]
    assert compress(t, specs) == {0: A0}
    default = propagate(t)
    assert [default[v] for v in (0, 1, 2)] == [R, R, R]  # arguments replicated
    assert default[3] == A0  # slicing a replicated operand is free: split the work, lowest index on ties
    assert compress(t, default) == {}
    with pytest.raises(ValueError, match="not a result spec"):
        evaluate_spmd(t, {**specs, 0: ((0,), (0,))})


_TABLES = {train: _tables(64, 128, 32, train=train) for train in (False, True)}


def _random_layout(data, t):
    specs = {}
    for u in range(t.num_units):
        row = data.draw(st.integers(0, len(t.out_specs[u]) - 1))
        for v in t.unit_values(u):
            specs[v] = from_assignment(t.out_specs[u][row], len(t.shapes[v]))
    return specs


@pytest.mark.parametrize("train", [False, True])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_propagate_of_compress_is_identity(train, data):
    t = _TABLES[train]
    specs = _random_layout(data, t)
    assert propagate(t, compress(t, specs)) == specs
    ev = evaluate_spmd(t, specs)
    assert ev.step_time >= ev.compute > 0


def test_only_zero_fits_when_replicated_optimizer_state_does_not():
    """Adam keeps weights, gradients and two states: data parallel holds 4x the weights per device, ZeRO-1
    (states over the 4-way data axis) 2.5x, ZeRO-2 (gradients too) 1.75x; the step's collectives stay."""
    topo, mesh = topology("h100-1x8"), LogicalMesh.build(topology("h100-1x8"), (4,), range(4))
    g = mlp(256, 8192, 256, train=True)
    dp_specs, _ = _layouts(True)
    t = ShardingTables.build(g, topo, mesh, mode="training", optimizer="adam")
    dp, z1, z2 = (evaluate_spmd(t, dp_specs, zero=z) for z in (0, 1, 2))
    weights = 2 * 8192 * 256 * 4
    assert dp.memory_parts["params"] == 4 * weights
    assert z1.memory_parts["params"] == pytest.approx(2.5 * weights)
    assert z2.memory_parts["params"] == pytest.approx(1.75 * weights)
    assert z1.collectives == dp.collectives and z1.step_time == dp.step_time
    capacity = (dp.memory + z1.memory) / 2
    tight = ShardingTables.build(g, topo, mesh, mode="training", optimizer="adam",
                                 memory_headroom=1.0 - capacity / float(topo.memory[0]))
    assert not evaluate_spmd(tight, dp_specs).feasible
    assert evaluate_spmd(tight, dp_specs, zero=1).feasible and evaluate_spmd(tight, dp_specs, zero=2).feasible
