"""The small-size penalty (issue 16 item 2): a kernel of F FLOPs reaches efficiency x F / (F + h), so
a batch split over replicas keeps a per-kernel part that never shrinks."""

from __future__ import annotations

import numpy as np
import pytest

from planmap.cluster import Topology
from planmap.cost import CostModel
from tests.core.test_cost import cluster, graph

H = 5e10  # FLOPs per kernel at half efficiency


def _penalised() -> Topology:
    body = cluster().body
    gpu = body.device_types[1].model_copy(update={"half_efficiency_flops": H})
    return Topology.from_spec(body.model_copy(update={"device_types": [body.device_types[0], gpu]}))


def test_efficiency_curve_per_kernel():
    plain = CostModel.build(graph(), cluster(), kernels=np.array([1, 3, 1]))
    cost = CostModel.build(graph(), _penalised(), kernels=np.array([1, 3, 1]))
    fixed = [H / (100e12 * 0.5), 3 * H / (400e12 * 0.5), 0.0]  # f32, bf16 (3 kernels), no FLOPs: no penalty
    assert cost.compute[:, 1] - plain.compute[:, 1] == pytest.approx(fixed)
    assert cost.launch[:, 1] - plain.launch[:, 1] == pytest.approx(fixed)
    assert cost.compute[:, 0] == pytest.approx(plain.compute[:, 0])  # the CPU type has no penalty
    # node 0 alone: time = (F + h) / (peak x eff) + launch, i.e. efficiency 0.5 x F / (F + h)
    f = 2e12
    assert cost.compute[0, 1] - 2e-6 == pytest.approx(f / (100e12 * 0.5 * f / (f + H)))


def test_replicas_keep_the_fixed_part():
    """Eight replicas: each runs F/8 FLOPs per kernel, at that size's lower efficiency."""
    cost = CostModel.build(graph(), _penalised(), kernels=np.array([1, 3, 1]))
    t, launch = cost.compute[0, 1], cost.launch[0, 1]
    per_replica = cost.replicated(t, launch, 8)
    f = 2e12 / 8
    assert per_replica == pytest.approx(f / (100e12 * 0.5 * f / (f + H)) + 2e-6)
    assert per_replica > t / 8


def test_default_is_no_penalty():
    assert cluster().body.device_types[1].half_efficiency_flops == 0
