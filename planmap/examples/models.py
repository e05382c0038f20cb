"""Small example networks in plain ``jax.numpy``: an MLP, a GPT-style transformer and a ResNet-style CNN.

They are what the example specs plan for and what the runtime tests execute, so they are written
with explicit name scopes (``jax.named_scope``) — the front end reads those name stacks to find
repeated layers — and in two flavours: inference (``forward``) and training (a value-and-grad
step returning ``(loss, grads)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, TypedDict

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["ModelDef", "EXAMPLES", "mlp", "gpt", "gpt2host", "cnn", "get"]


@dataclass(frozen=True)
class ModelDef:
    """An example network: how to make its parameters and inputs, and its two entry points."""

    name: str
    init: Any  # (key) -> params pytree
    inputs: Any  # (key) -> tuple of data arrays (inference)
    targets: Any  # (key) -> target array for the training loss
    forward: Any  # (params, *inputs) -> outputs
    loss: Any  # (params, *inputs, targets) -> scalar

    def train_step(self):
        """The value-and-grad step the training artifact is exported from."""
        return jax.value_and_grad(self.loss)

    def abstract_args(self, train: bool = False) -> tuple:
        """ShapeDtypeStructs of (params, *inputs[, targets]) — export needs no real arrays."""
        def make(key):
            return (self.init(key), *self.inputs(key)) + ((self.targets(key),) if train else ())

        # eval_shape traces the initialisers without running them (the CNN's take seconds to run)
        return jax.eval_shape(make, jax.random.PRNGKey(0))


def _dense(key, a, b, scale=None):
    return jax.random.normal(key, (a, b), jnp.float32) * (scale or 1.0 / np.sqrt(a))


# ------------------------------------------------------------------------------------------ MLP
def _mlp_init(key, sizes=(256, 512, 512, 512, 64)):
    keys = jax.random.split(key, len(sizes) - 1)
    return {f"layer{i}": {"w": _dense(k, a, b), "b": jnp.zeros((b,), jnp.float32)}
            for i, (k, a, b) in enumerate(zip(keys, sizes[:-1], sizes[1:], strict=True))}


def _mlp_forward(params, x):
    n = len(params)
    for i in range(n):
        with jax.named_scope(f"layer{i}"):
            p = params[f"layer{i}"]
            x = x @ p["w"] + p["b"]
            if i < n - 1:
                x = jax.nn.relu(x)
    return x


def _mse(forward):
    def loss(params, *args):
        *inputs, y = args
        return jnp.mean((forward(params, *inputs) - y) ** 2)
    return loss


mlp = ModelDef(
    name="mlp",
    init=_mlp_init,
    inputs=lambda key: (jax.random.normal(key, (32, 256), jnp.float32),),
    targets=lambda key: jax.random.normal(jax.random.fold_in(key, 1), (32, 64), jnp.float32),
    forward=_mlp_forward,
    loss=_mse(_mlp_forward),
)


# ------------------------------------------------------------------------------------------ GPT
GPT = dict(layers=4, d=128, heads=4, ff=512, vocab=512, seq=64, batch=8)


def _gpt_init(key, layers=GPT["layers"], d=GPT["d"], ff=GPT["ff"], vocab=GPT["vocab"], seq=GPT["seq"]):
    keys = jax.random.split(key, layers + 2)
    blocks = {}
    for i in range(layers):
        k = jax.random.split(keys[i], 4)
        blocks[f"layer{i}"] = {
            "ln1": {"g": jnp.ones((d,)), "b": jnp.zeros((d,))},
            "attn": {"wqkv": _dense(k[0], d, 3 * d), "wo": _dense(k[1], d, d)},
            "ln2": {"g": jnp.ones((d,)), "b": jnp.zeros((d,))},
            "mlp": {"w1": _dense(k[2], d, ff), "b1": jnp.zeros((ff,)), "w2": _dense(k[3], ff, d),
                    "b2": jnp.zeros((d,))},
        }
    return {"embed": {"wte": _dense(keys[-2], vocab, d, 0.02), "wpe": _dense(keys[-1], seq, d, 0.02)},
            "blocks": blocks, "lnf": {"g": jnp.ones((d,)), "b": jnp.zeros((d,))}}


def _layernorm(x, p, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + eps) * p["g"] + p["b"]


def _attention(x, p, heads, causal_bias=False):
    b, t, d = x.shape
    hd = d // heads
    q, k, v = jnp.split(x @ p["wqkv"], 3, axis=-1)
    q, k, v = (a.reshape(b, t, heads, hd) for a in (q, k, v))
    s = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(hd)
    if causal_bias:  # an additive (t, t) mask: every op on the scores is elementwise, with the batch dim
        s = s + (1.0 - jnp.tril(jnp.ones((t, t), jnp.float32))) * -1e9
    else:
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
    o = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s, axis=-1), v).reshape(b, t, d)
    return o @ p["wo"]


def _gpt_forward(params, tokens, heads=GPT["heads"], causal_bias=False):
    with jax.named_scope("embed"):
        x = params["embed"]["wte"][tokens] + params["embed"]["wpe"][None, : tokens.shape[1]]
    for i in range(len(params["blocks"])):
        p = params["blocks"][f"layer{i}"]
        with jax.named_scope(f"layer{i}"):
            with jax.named_scope("attn"):
                x = x + _attention(_layernorm(x, p["ln1"]), p["attn"], heads, causal_bias)
            with jax.named_scope("mlp"):
                h = jax.nn.gelu(_layernorm(x, p["ln2"]) @ p["mlp"]["w1"] + p["mlp"]["b1"])
                x = x + h @ p["mlp"]["w2"] + p["mlp"]["b2"]
    with jax.named_scope("head"):
        x = _layernorm(x, params["lnf"])
        return x @ params["embed"]["wte"].T


def _gpt_loss(params, tokens, targets):
    logits = _gpt_forward(params, tokens)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


gpt = ModelDef(
    name="gpt",
    init=_gpt_init,
    inputs=lambda key: (jax.random.randint(key, (GPT["batch"], GPT["seq"]), 0, GPT["vocab"], jnp.int32),),
    targets=lambda key: jax.random.randint(jax.random.fold_in(key, 1), (GPT["batch"], GPT["seq"]), 0,
                                           GPT["vocab"], jnp.int32),
    forward=_gpt_forward,
    loss=_gpt_loss,
)


# The same GPT blocks as the 2-host example plans them: a 128-token context and microbatches of 64 sequences,
# enough work per layer that splitting it over 16 H100 beats paying each layer's kernel launches on fewer.
# The causal mask is an additive bias and the loss is written out (no jnp.where / take_along_axis calls), so
# every op on the attention scores and the logits carries the batch dimension for the sharding search.
GPT2HOST = dict(GPT, seq=128, batch=64)


def _gpt2host_loss(params, tokens, targets):
    logits = _gpt_forward(params, tokens, causal_bias=True)
    top = jax.lax.stop_gradient(logits.max(axis=-1, keepdims=True))
    lse = jnp.log(jnp.exp(logits - top).sum(axis=-1)) + top[..., 0]
    picked = jnp.sum((targets[..., None] == jnp.arange(logits.shape[-1])).astype(logits.dtype) * logits, axis=-1)
    return jnp.mean(lse - picked)


def _tokens(key, shape):
    return jax.random.randint(key, (shape["batch"], shape["seq"]), 0, shape["vocab"], jnp.int32)


gpt2host = ModelDef(
    name="gpt2host",
    init=partial(_gpt_init, seq=GPT2HOST["seq"]),
    inputs=lambda key: (_tokens(key, GPT2HOST),),
    targets=lambda key: _tokens(jax.random.fold_in(key, 1), GPT2HOST),
    forward=partial(_gpt_forward, causal_bias=True),
    loss=_gpt2host_loss,
)


# ------------------------------------------------------------------------------------------ CNN


class CnnShape(TypedDict):
    """The CNN's sizes: (channels, blocks) per stage, batch, image side, classes."""

    stages: tuple[tuple[int, int], ...]
    batch: int
    size: int
    classes: int


CNN = CnnShape(stages=((16, 2), (32, 2), (64, 2)), batch=8, size=32, classes=10)


def _conv(x, w, stride=1):
    return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _cnn_init(key):
    params: dict[str, Any] = {}
    cin = 3
    k = iter(jax.random.split(key, 64))
    params["stem"] = {"w": jax.random.normal(next(k), (3, 3, cin, 16)) / np.sqrt(9 * cin)}
    cin = 16
    for s, (ch, blocks) in enumerate(CNN["stages"]):
        for b in range(blocks):
            blk = {"w1": jax.random.normal(next(k), (3, 3, cin, ch)) / np.sqrt(9 * cin),
                   "w2": jax.random.normal(next(k), (3, 3, ch, ch)) / np.sqrt(9 * ch),
                   "g": jnp.ones((ch,)), "b": jnp.zeros((ch,))}
            if cin != ch:
                blk["proj"] = jax.random.normal(next(k), (1, 1, cin, ch)) / np.sqrt(cin)
            params[f"stage{s}_block{b}"] = blk
            cin = ch
    params["head"] = {"w": _dense(next(k), cin, CNN["classes"]), "b": jnp.zeros((CNN["classes"],))}
    return params


def _cnn_forward(params, images):
    with jax.named_scope("stem"):
        x = jax.nn.relu(_conv(images, params["stem"]["w"]))
    for s, (_, blocks) in enumerate(CNN["stages"]):
        for b in range(blocks):
            p = params[f"stage{s}_block{b}"]
            stride = 2 if (b == 0 and s > 0) else 1
            with jax.named_scope(f"stage{s}_block{b}"):
                h = jax.nn.relu(_conv(x, p["w1"], stride))
                h = _conv(h, p["w2"]) * p["g"] + p["b"]
                skip = _conv(x, p["proj"], stride) if "proj" in p else x
                x = jax.nn.relu(h + skip)
    with jax.named_scope("head"):
        return x.mean(axis=(1, 2)) @ params["head"]["w"] + params["head"]["b"]


def _cnn_loss(params, images, labels):
    logp = jax.nn.log_softmax(_cnn_forward(params, images), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


cnn = ModelDef(
    name="cnn",
    init=_cnn_init,
    inputs=lambda key: (jax.random.normal(key, (CNN["batch"], CNN["size"], CNN["size"], 3), jnp.float32),),
    targets=lambda key: jax.random.randint(jax.random.fold_in(key, 1), (CNN["batch"],), 0, CNN["classes"],
                                           jnp.int32),
    forward=_cnn_forward,
    loss=_cnn_loss,
)

EXAMPLES: dict[str, ModelDef] = {m.name: m for m in (mlp, gpt, gpt2host, cnn)}


def get(name: str) -> ModelDef:
    """The example model called ``name`` (mlp, gpt, gpt2host, cnn)."""
    try:
        return EXAMPLES[name]
    except KeyError:
        raise KeyError(f"unknown example model {name!r}; expected one of {sorted(EXAMPLES)}") from None
