#!/usr/bin/env python
"""Regenerate tests/fixtures/thirdparty/: HF transformers (PyTorch) and Keras CNNs (TensorFlow) as StableHLO.

The sharding and whole-cluster checks of the example specs run on planmap's own JAX models; these
fixtures are the same checks' third-party inputs (tests/solvers/test_thirdparty_models.py), made by the
real frameworks through planmap's own export paths, every weight an argument of ``@main``:

* ``hf_bert.mlir``, ``hf_gpt2.mlir``, ``hf_t5.mlir``: tiny randomly initialised ``transformers`` models
  (BertModel, GPT2LMHeadModel, T5ForConditionalGeneration) exported by :func:`planmap.export.torch`
  (``torch.export`` -> torchax -> ``jax.export``; parameters and buffers are ``states[i]`` before the
  inputs).
* ``hf_gpt2_train.mlir``: a training step of the same GPT-2 (causal-LM loss and the gradient of every
  float parameter). ``torch.export`` captures the forward graph only (no autograd), so the step takes
  the JAX function that torchax makes of the exported forward program (the function
  :func:`planmap.export.torch` lowers) and differentiates it with ``jax.value_and_grad``;
  :func:`planmap.export.jax` writes it.
* ``keras_resnet.mlir``, ``keras_mobilenet.mlir``: a small ResNet-style CNN (residual blocks, batch
  norm) and a MobileNetV2-style CNN (inverted residuals with depthwise convolutions, batch norm, ReLU6),
  inference, exported by :func:`planmap.export.tf` (``tf.function(jit_compile=True)`` -> StableHLO text;
  the input first, then the Keras variables).

Needs ``transformers`` and ``tensorflow-cpu`` next to the ``export`` extra; neither is a planmap
dependency (versions: tests/fixtures/thirdparty/PROVENANCE.md). Not run in CI::

    .venv/bin/python -m pip install -c constraints.txt transformers==4.57.6 tensorflow-cpu==2.21.0
    .venv/bin/python tools/export_thirdparty_fixtures.py [--only NAME ...] [OUT_DIR]

``--plans`` (needs neither framework) re-solves the committed plans beside the specs instead:
``plans/<spec>.sharding.plan.yaml`` (from ``<spec>.sharding.yaml``, ``solver: sharding``, under the spec's 30 s
limit: the IP's answer may differ from run to run) and ``plans/<spec>.plan.yaml`` (``auto``, the whole-cluster planner).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH = 8  # a microbatch that 8 devices can split (data parallel)
SEQ = 64
VOCAB = 1024


def _transformer_sizes() -> dict:
    return dict(layers=2, hidden=128, heads=4, ffn=512)


def bert(out: Path) -> Path:
    """A 2-layer BERT encoder (hidden 128, 4 heads, FFN 512, vocabulary 1024), token ids [8, 64]."""
    import torch
    from transformers import BertConfig, BertModel

    import planmap.export

    s = _transformer_sizes()
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                     num_attention_heads=s["heads"], intermediate_size=s["ffn"], max_position_embeddings=SEQ,
                     attn_implementation="eager")
    model = BertModel(cfg, add_pooling_layer=False)

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, input_ids):
            return self.bert(input_ids=input_ids).last_hidden_state

    return planmap.export.torch(Encoder(), torch.zeros(BATCH, SEQ, dtype=torch.long), path=out / "hf_bert.mlir")


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    s = _transformer_sizes()
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=s["hidden"], n_layer=s["layers"], n_head=s["heads"],
                     n_inner=s["ffn"], attn_implementation="eager", use_cache=False)
    return GPT2LMHeadModel(cfg)


def gpt2(out: Path) -> Path:
    """A 2-layer GPT-2 language model (logits over the vocabulary), token ids [8, 64]."""
    import torch

    import planmap.export

    model = _gpt2()

    class LM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt2 = model

        def forward(self, input_ids):
            return self.gpt2(input_ids=input_ids).logits

    return planmap.export.torch(LM(), torch.zeros(BATCH, SEQ, dtype=torch.long), path=out / "hf_gpt2.mlir")


def gpt2_train(out: Path) -> Path:
    """The GPT-2 above as a training step: (loss, gradients of the float parameters) of the causal-LM loss."""
    import jax
    import jax.numpy as jnp
    import torch

    import planmap.export

    planmap.export._allow_removed_named_overloads()  # what planmap.export.torch does before importing torchax
    from torchax.export import exported_program_to_jax

    model = _gpt2()

    class Loss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt2 = model

        def forward(self, input_ids, labels):
            return self.gpt2(input_ids=input_ids, labels=labels).loss

    ids = torch.zeros(BATCH, SEQ, dtype=torch.long)
    with planmap.export._names_only_locations():
        program = torch.export.export(Loss().eval(), (ids, ids.clone()))  # distinct tensors: not aliased
        states, forward = exported_program_to_jax(program)
    floats = [i for i, s in enumerate(states) if jnp.issubdtype(s.dtype, jnp.floating)]

    def train_step(states, input_ids, labels):
        def loss(weights):
            full = list(states)
            for i, w in zip(floats, weights, strict=True):
                full[i] = w
            return forward(full, (input_ids, labels))[0]

        return jax.value_and_grad(loss)([states[i] for i in floats])

    avals = [jax.ShapeDtypeStruct(s.shape, s.dtype) for s in states]
    tokens = jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32)
    return planmap.export.jax(train_step, avals, tokens, tokens, path=out / "hf_gpt2_train.mlir")


def t5(out: Path) -> Path:
    """A T5 encoder-decoder (2 + 2 layers, d_model 128, 4 heads of 32, FFN 512): logits, encoder tokens
    [8, 64], decoder tokens [8, 32]."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    import planmap.export

    s = _transformer_sizes()
    cfg = T5Config(vocab_size=VOCAB, d_model=s["hidden"], d_kv=s["hidden"] // s["heads"], d_ff=s["ffn"],
                   num_layers=s["layers"], num_decoder_layers=s["layers"], num_heads=s["heads"],
                   relative_attention_num_buckets=16, relative_attention_max_distance=32, use_cache=False,
                   attn_implementation="eager")
    model = T5ForConditionalGeneration(cfg)

    class Seq2Seq(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.t5 = model

        def forward(self, input_ids, decoder_input_ids):
            return self.t5(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits

    enc, dec = torch.zeros(BATCH, SEQ, dtype=torch.long), torch.zeros(BATCH, SEQ // 2, dtype=torch.long)
    return planmap.export.torch(Seq2Seq(), enc, dec, path=out / "hf_t5.mlir")


IMAGE = (32, 32, 3)
CLASSES = 10


def _keras_head(tf, x):
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    return tf.keras.layers.Dense(CLASSES)(x)


def resnet(out: Path) -> Path:
    """A ResNet-style CNN on 32x32x3 images: stem conv, three stages of two residual basic blocks (3x3 conv,
    batch norm, ReLU; a strided 1x1 projection where the shape changes), 32 -> 64 -> 128 channels,
    global pooling and a 10-way dense head. Inference (batch norm from its moving statistics)."""
    import tensorflow as tf

    import planmap.export

    L = tf.keras.layers

    def conv_bn(x, ch, k, stride, relu=True):
        x = L.Conv2D(ch, k, strides=stride, padding="same", use_bias=False)(x)
        x = L.BatchNormalization()(x)
        return L.ReLU()(x) if relu else x

    def block(x, ch, stride):
        y = conv_bn(x, ch, 3, stride)
        y = conv_bn(y, ch, 3, 1, relu=False)
        if stride != 1 or x.shape[-1] != ch:
            x = conv_bn(x, ch, 1, stride, relu=False)
        return L.ReLU()(L.Add()([x, y]))

    tf.keras.utils.set_random_seed(0)
    inp = tf.keras.Input(IMAGE)
    x = conv_bn(inp, 32, 3, 1)
    for ch, stride in ((32, 1), (64, 2), (128, 2)):
        x = block(block(x, ch, stride), ch, 1)
    model = tf.keras.Model(inp, _keras_head(tf, x))
    return planmap.export.tf(model, tf.zeros((BATCH, *IMAGE)), path=out / "keras_resnet.mlir")


def mobilenet(out: Path) -> Path:
    """A MobileNetV2-style CNN on 32x32x3 images: stem conv, inverted residual blocks (1x1 expansion x6,
    3x3 depthwise conv, 1x1 linear projection; batch norm and ReLU6; a residual where the shape is kept),
    16 -> 24 -> 32 -> 64 channels, 1x1 conv to 256, global pooling and a dense head. Inference."""
    import tensorflow as tf

    import planmap.export

    L = tf.keras.layers

    def bn_relu6(x, relu=True):
        x = L.BatchNormalization()(x)
        return L.ReLU(6.0)(x) if relu else x

    def inverted(x, ch, stride, expand=6):
        y = bn_relu6(L.Conv2D(x.shape[-1] * expand, 1, use_bias=False)(x))
        y = bn_relu6(L.DepthwiseConv2D(3, strides=stride, padding="same", use_bias=False)(y))
        y = bn_relu6(L.Conv2D(ch, 1, use_bias=False)(y), relu=False)
        return L.Add()([x, y]) if stride == 1 and x.shape[-1] == ch else y

    tf.keras.utils.set_random_seed(0)
    inp = tf.keras.Input(IMAGE)
    x = bn_relu6(L.Conv2D(16, 3, padding="same", use_bias=False)(inp))
    for ch, stride in ((24, 2), (24, 1), (32, 2), (32, 1), (64, 2), (64, 1)):
        x = inverted(x, ch, stride)
    x = bn_relu6(L.Conv2D(256, 1, use_bias=False)(x))
    model = tf.keras.Model(inp, _keras_head(tf, x))
    return planmap.export.tf(model, tf.zeros((BATCH, *IMAGE)), path=out / "keras_mobilenet.mlir")


EXPORTS = {"hf_bert": bert, "hf_gpt2": gpt2, "hf_gpt2_train": gpt2_train, "hf_t5": t5,
           "keras_resnet": resnet, "keras_mobilenet": mobilenet}


def solve_plans(folder: Path) -> None:
    """``planmap solve`` every spec in ``folder`` (each model's auto and sharding specs) into ``folder/plans``."""
    from planmap.cli import main as cli

    here = Path.cwd()
    os.chdir(folder)
    try:
        # <name>.yaml solves with auto, <name>.sharding.yaml (the same spec, solver: sharding) with the sharding
        # solver: a plan follows from its spec alone (`planmap check` rejects a --solver override)
        for spec in sorted(Path(".").glob("*.yaml")):
            if cli(["solve", spec.name, "-o", f"plans/{spec.stem}.plan.yaml", "-q"]) != 0:
                raise SystemExit(f"planmap solve {spec} failed")
    finally:
        os.chdir(here)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path, default=Path("tests/fixtures/thirdparty"))
    ap.add_argument("--only", nargs="*", choices=sorted(EXPORTS), default=sorted(EXPORTS))
    ap.add_argument("--plans", action="store_true", help="re-solve the committed plans of the specs in OUT")
    args = ap.parse_args()
    if args.plans:
        return solve_plans(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        if name.startswith("hf_"):
            import torch

            torch.manual_seed(0)
        path = EXPORTS[name](args.out)
        print(f"wrote {path} ({path.stat().st_size:,} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
