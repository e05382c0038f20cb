#!/usr/bin/env python
"""Regenerate tests/fixtures/tf_mlp.{mlir,mlirbc}: the example MLP written in TensorFlow, as StableHLO.

Route: ``tf.function(jit_compile=True).experimental_get_compiler_ir(x)`` with ``stage='stablehlo'``
(StableHLO text) and ``stage='stablehlo_serialized'`` (plain MLIR bytecode — planmap's ``mlirbc``
format). The network is ``planmap.examples.models.mlp`` layer for layer (256 -> 512 -> 512 -> 512 ->
64, ReLU, batch 32), so the front end must find the same FLOPs as in the JAX export
(tests/frontend/test_frameworks.py). The weights are ``tf.Variable``s, which become arguments of
``@main`` after the input. The text drops TF's source-file locations; the bytecode keeps them (they
are only debug locations).

TensorFlow is not a planmap dependency and conflicts with the project's pins; run this script in a
throwaway venv (it imports nothing from planmap):

    python3.11 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0
    /tmp/tfvenv/bin/python tools/export_tf_fixture.py [OUT_DIR]
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

SIZES = (256, 512, 512, 512, 64)
BATCH = 32


def main(out_dir: Path) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.random.set_seed(0)
    weights = [(tf.Variable(tf.random.normal((a, b)) / a**0.5), tf.Variable(tf.zeros((b,))))
               for a, b in zip(SIZES[:-1], SIZES[1:], strict=True)]

    @tf.function(jit_compile=True)
    def mlp(x):
        for i, (w, b) in enumerate(weights):
            x = tf.matmul(x, w) + b
            if i < len(weights) - 1:
                x = tf.nn.relu(x)
        return x

    x = tf.zeros((BATCH, SIZES[0]))
    ir = mlp.experimental_get_compiler_ir(x)
    text = out_dir / "tf_mlp.mlir"
    # TF attaches the Python source position of each op; drop file paths so the fixture is reproducible
    text.write_text(re.sub(r'loc\("[^"]*":\d+:\d+\)', "loc(unknown)", ir(stage="stablehlo")))
    blob = out_dir / "tf_mlp.mlirbc"
    blob.write_bytes(ir(stage="stablehlo_serialized"))
    for p in (text, blob):
        print(f"wrote {p} ({p.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("tests/fixtures"))
