"""Issue 12's classic case "a CNN with a large batch is data parallel": the sharding IP, on a 1-D mesh of
4 GPUs, keeps every convolution weight replicated, runs every convolution on a quarter of the batch and
all-reduces each convolution weight's gradient once. (The tiny dense head may instead run replicated after
one all-gather of the pooled features, which is no dearer than all-reducing its gradient; XLA makes the same
kind of choice, see bench/results/sharding.md.)"""

from __future__ import annotations

import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import planmap.export  # noqa: E402
from planmap import frontend  # noqa: E402
from tests.solvers.sharding.test_ip import checked, tables_on, weights  # noqa: E402


def cnn_step(tmp_path, batch: int, size: int = 32, channels: int = 32):
    """The exported training step of a 3-conv CNN (ReLU, global pooling, a dense head)."""
    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def loss(params, images, labels):
        x = images
        for i, w in enumerate(params[:-1]):
            with jax.named_scope(f"conv{i}"):
                x = jax.nn.relu(conv(x, w))
        logits = x.mean(axis=(1, 2)) @ params[-1]
        return jnp.mean((logits - labels) ** 2)

    f32 = jnp.float32
    params = [jax.ShapeDtypeStruct((3, 3, 3, channels), f32), jax.ShapeDtypeStruct((3, 3, channels, channels), f32),
              jax.ShapeDtypeStruct((3, 3, channels, channels), f32), jax.ShapeDtypeStruct((channels, 10), f32)]
    images = jax.ShapeDtypeStruct((batch, size, size, 3), f32)
    labels = jax.ShapeDtypeStruct((batch, 10), f32)
    path = planmap.export.jax(jax.value_and_grad(loss), params, images, labels, path=tmp_path / "cnn.mlir")
    return frontend.load_model(path)


def test_large_batch_cnn_is_data_parallel(tmp_path):
    g = cnn_step(tmp_path, batch=512)
    t = tables_on(g, "h100-1x8", [0, 1, 2, 3], axes=1)
    ans, ev = checked(t)
    convs = [w for w in weights(t) if w.type.rank == 4]
    assert len(convs) == 3
    assert all(all(dim == () for dim in ans.specs[w.value]) for w in convs)  # every conv weight replicated
    images = next(a for a in t.graph.args if a.role == "data" and a.type.rank == 4)
    assert ans.specs[images.value][0] == (0,)  # the batch dim of the images over the axis
    forward = [i for i in range(t.num_ops) if t.graph.kind[i] == "stablehlo.convolution" and not t.graph.backward[i]]
    assert len(forward) == 3 and all(ans.specs[t.unit_values(i)[0]][0] == (0,) for i in forward)
    # each conv weight's gradient is reduced over the data axis once (all-reduce or reduce-scatter)
    reduced = [int(c[2]) for c in ev.collectives if c[0] in ("all-reduce", "reduce-scatter") for _ in range(c[3])]
    conv_bytes = sorted(int(t.graph.value_bytes[w.value]) for w in convs)
    assert sorted(b for b in reduced if b in conv_bytes) == conv_bytes, ev.collectives
