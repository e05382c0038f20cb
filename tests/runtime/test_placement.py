"""Placement plans (the latency objective): every stage on one device, non-contiguous, CPU + 4 accelerators.

On this machine all five are fake CPU devices; the runtime does not care which is which, only that
each segment runs on its own device in dependency order and values move between them.
"""

from __future__ import annotations

import numpy as np

import planmap.runtime as rt
from planmap.examples.models import mlp
from tests.runtime.conftest import leaves, mlp_batch, single_device
from tests.runtime.plans import stage, write_plan

MLP_X = 8
CLUSTER = ["cpu0", "acc0", "acc1", "acc2", "acc3"]

# MLP ops: layer i = dot (5i), bias broadcasts (5i+1, 5i+2), add (5i+3), relu (5i+4); layer 3 ends at 19
STAGES = [
    stage(["acc0"], [(0, 5), (15, 19)]),   # layers 0 and 3 on acc0: not convex -> two segments
    stage(["acc1"], [(5, 10)]),            # layer 1
    stage(["cpu0"], [(10, 13)]),           # layer 2's matmul and bias broadcast on the CPU
    stage(["acc2"], [(13, 14)]),           # its add
    stage(["acc3"], [(14, 15)]),           # its relu
    stage(["acc1"], []),                   # an empty second stage on acc1: allowed, runs nothing
]


def test_non_contiguous_placement_over_cpu_and_four_devices(plan_dir, mlp_params):
    path = write_plan(plan_dir, "mlp", STAGES, data_args=[MLP_X], devices=CLUSTER, objective="latency",
                      name="placement")
    exe = rt.load(path, unchecked=True)
    x = mlp_batch(32)
    (y,) = exe(*leaves(mlp_params), x)
    np.testing.assert_allclose(np.asarray(y), single_device(mlp.forward, mlp_params, x), rtol=1e-5, atol=1e-5)
    # plan devices map to jax.devices() in mesh order: cpu0 -> device 0, acc0 -> 1, ...
    assert [(s.stage, sorted(s.device_ids)) for s in exe.segments] == [
        (0, [1]), (1, [2]), (2, [0]), (3, [3]), (4, [4]), (0, [1])]
    assert y.sharding.device_set == {exe.segments[-1].mesh.mesh.devices.flat[0]}


def test_placement_on_a_chosen_device_list(plan_dir, mlp_params):
    import jax

    path = write_plan(plan_dir, "mlp", STAGES, data_args=[MLP_X], devices=CLUSTER, objective="latency",
                      name="placement")
    chosen = jax.devices()[3:8]  # cpu0 -> device 3, acc0 -> 4, ...
    exe = rt.load(path, devices=chosen, unchecked=True)
    x = mlp_batch(32)
    (y,) = exe(*leaves(mlp_params), x)
    np.testing.assert_allclose(np.asarray(y), single_device(mlp.forward, mlp_params, x), rtol=1e-5, atol=1e-5)
    assert {d for s in exe.segments for d in s.device_ids} == {d.id for d in chosen}
