"""SPMD plans (one stage over the 8-device mesh): data parallel and Megatron tensor parallel.

Each plan's result is compared with the model's JAX function on one device (tolerances in
conftest.py), and the compiled program is inspected to show the plan took effect — a runtime that
ignored the shardings would still compute the right numbers.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import planmap.runtime as rt
from planmap.examples.models import gpt, mlp
from planmap.runtime.artifact import Artifact
from planmap.runtime.ir_graph import EntryGraph
from tests.runtime.conftest import gpt_tokens, leaves, mlp_batch, single_device
from tests.runtime.plans import MODELS, devs, stage, write_plan

MLP_OPS = 19  # top-level ops of specs/models/mlp.mlir
MLP_X = 8  # argument index of the MLP's input batch


def _megatron_specs(names) -> dict[int, list]:
    """Column-parallel wqkv/w1 (and b1), row-parallel wo/w2, by argument name."""
    specs = {}
    for i, name in enumerate(names):
        if name.endswith("['wqkv']") or name.endswith("['w1']") or name == "params['layer0']['w']":
            specs[i] = [None, "model"]
        elif name.endswith("['b1']") or name == "params['layer0']['b']":
            specs[i] = ["model"]
        elif name.endswith("['wo']") or name.endswith("['w2']") or name == "params['layer1']['w']":
            specs[i] = ["model", None]
    return specs


@pytest.fixture(scope="module")
def dp_exe(plan_dir):
    path = write_plan(plan_dir, "mlp", [stage(devs(8), [(0, MLP_OPS)])], data_args=[MLP_X], mesh={"data": 8},
                      args={MLP_X: ["data", None]}, name="dp")
    return rt.load(path, unchecked=True)


def test_data_parallel_matches_one_device(dp_exe, mlp_params):
    x = mlp_batch(32)
    (y,) = dp_exe(*leaves(mlp_params), x)
    np.testing.assert_allclose(np.asarray(y), single_device(mlp.forward, mlp_params, x), rtol=1e-5, atol=1e-5)
    assert y.sharding.spec == P("data", None) and len(y.sharding.device_set) == 8
    assert dp_exe.input_shardings[MLP_X].spec == P("data", None)
    assert dp_exe.input_shardings[1].spec == P(None, None)  # parameters replicated
    # each device multiplies its 4 rows: the per-device first matmul is [4, 512]
    assert "f32[4,512]" in dp_exe.segments[0].fn.as_text()
    # parameters placed once where the plan wants them are used as they are
    placed = [rt.place(p, s) for p, s in zip([*leaves(mlp_params), x], dp_exe.input_shardings, strict=True)]
    assert rt.place(placed[MLP_X], dp_exe.input_shardings[MLP_X]) is placed[MLP_X]
    np.testing.assert_array_equal(np.asarray(dp_exe(*placed)[0]), np.asarray(y))


def test_megatron_mlp_matches_one_device(plan_dir, mlp_params):
    names = Artifact.from_file(MODELS / "mlp.mlir").arg_names
    path = write_plan(plan_dir, "mlp", [stage(devs(8), [(0, MLP_OPS)])], data_args=[MLP_X],
                      mesh={"data": 2, "model": 4}, args={**_megatron_specs(names), MLP_X: ["data", None]},
                      values={(4, 0): ["data", "model"]}, name="megatron")
    exe = rt.load(path, unchecked=True)
    x = mlp_batch(32)
    (y,) = exe(*leaves(mlp_params), x)
    np.testing.assert_allclose(np.asarray(y), single_device(mlp.forward, mlp_params, x), rtol=1e-5, atol=1e-5)
    assert "sdy.sharding_constraint" in exe.segments[0].module_text
    hlo = exe.segments[0].fn.as_text()
    assert "f32[16,128]" in hlo  # column-parallel layer 0 on each device: 32/2 rows x 512/4 columns
    assert "all-reduce(" in hlo  # the row-parallel layer 1 sums partial products


def test_megatron_attention_matches_one_device(plan_dir, gpt_params):
    art = Artifact.from_file(MODELS / "gpt.mlir")
    graph = EntryGraph.from_artifact(art)
    tokens = art.arg_names.index("tokens")
    heads = {(i, 0): ["data", None, "model", None] for i, kind in enumerate(graph.op_kind)
             if kind == "stablehlo.reshape" and graph.result_types[i][0].shape == (8, 64, 4, 32)}
    assert len(heads) == 12  # q, k, v of 4 layers
    path = write_plan(plan_dir, "gpt", [stage(devs(8), [(0, graph.n_ops)])], data_args=[tokens],
                      mesh={"data": 2, "model": 4}, args={**_megatron_specs(art.arg_names), tokens: ["data", None]},
                      values=heads, name="megatron")
    exe = rt.load(path, unchecked=True)
    tok = gpt_tokens(8)
    (y,) = exe(*leaves(gpt_params), tok)
    np.testing.assert_allclose(np.asarray(y), single_device(gpt.forward, gpt_params, tok), rtol=1e-4, atol=1e-4)
    hlo = exe.segments[0].fn.as_text()
    # attention scores per device: batch 8/2, heads 4/4 -> [4,1,64,64]; the MLP's hidden layer 512/4
    assert re.search(r"f32\[4,1,64,64\]", hlo)
    assert "f32[4,64,128]" in hlo or "f32[256,128]" in hlo
