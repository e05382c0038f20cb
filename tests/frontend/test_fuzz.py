"""Fuzzing: truncated, bit-flipped and random bytes and mutated text give an InputError — or, when the
mutation happens to leave a valid module, a graph — but never another exception and never a crash.

A crash of MLIR's readers would take the whole test process down, which is what the isolation child
(planmap.frontend.mlir) exists to prevent; these tests would then fail loudly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planmap.errors import InputError
from planmap.frontend import load_model
from planmap.graph import OpGraph

TOKENS = ["%0", "%arg0", "%arg99", "tensor<", "4x8x", "f32", "bf16", "i1", ">", "(", ")", "{", "}", "[", "]", ",",
          ":", "=", "-1", "0", "99999999999999999999", "stablehlo.add", "stablehlo.while", "func.call @main", "dims",
          "#loc", '"', "\n", "func.func", "^bb0", "<{", "}>", "dense<", "return", "contracting_dims = [5] x [0]",
          "loc(unknown)", "sdy.sharding", "stablehlo.dot_general", "@relu", "0x7FC00000", "\x00", "é"]


def _check(path: Path, **kw) -> None:
    try:
        graph = load_model(path, **kw)
    except InputError as e:
        assert str(path) in str(e) or "<" in str(e)
        return
    assert isinstance(graph, OpGraph)


@st.composite
def mutated_text(draw, source: str) -> str:
    text = source
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "insert", "duplicate", "digit", "truncate", "swap-lines"]))
        p = draw(st.integers(0, len(text)))
        if op == "delete":
            text = text[:p] + text[p + draw(st.integers(1, 40)):]
        elif op == "insert":
            text = text[:p] + draw(st.sampled_from(TOKENS)) + text[p:]
        elif op == "duplicate":
            q = draw(st.integers(0, len(text)))
            text = text[:p] + text[q:q + draw(st.integers(1, 80))] + text[p:]
        elif op == "digit":
            digits = [i for i, c in enumerate(text) if c.isdigit()]
            if digits:
                i = draw(st.sampled_from(digits))
                text = text[:i] + draw(st.sampled_from("0123456789")) + text[i + 1:]
        elif op == "truncate":
            text = text[:p]
        else:
            lines = text.split("\n")
            if len(lines) > 2:
                i = draw(st.integers(0, len(lines) - 2))
                lines[i], lines[i + 1] = lines[i + 1], lines[i]
                text = "\n".join(lines)
    return text


@pytest.fixture(scope="module")
def sources(models_dir, fixtures_dir) -> dict[str, str]:
    return {"mlp_train": (models_dir / "mlp_train.mlir").read_text(),
            "tf": (fixtures_dir / "tf_mlp.mlir").read_text()}


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_text(tmp_path, sources, data):
    source = sources[data.draw(st.sampled_from(sorted(sources)))]
    path = tmp_path / "mutated.mlir"
    path.write_text(data.draw(mutated_text(source)), encoding="utf-8")
    _check(path)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(blob=st.binary(min_size=0, max_size=4096))
def test_random_bytes(tmp_path, blob):
    path = tmp_path / "random.bin"
    path.write_bytes(blob)
    _check(path)


@st.composite
def mutated_bytes(draw, source: bytes) -> bytes:
    data = bytearray(source)
    op = draw(st.sampled_from(["flip", "truncate", "overwrite"]))
    if op == "flip":
        for _ in range(draw(st.integers(1, 8))):
            p = draw(st.integers(0, len(data) - 1))
            data[p] ^= 1 << draw(st.integers(0, 7))
    elif op == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    else:
        p = draw(st.integers(0, len(data) - 1))
        chunk = draw(st.binary(min_size=1, max_size=16))
        data[p:p + len(chunk)] = chunk
    return bytes(data)


def _byte_sources(artifacts, fixtures_dir) -> dict[str, bytes]:
    return {"vhlo": artifacts["vhlo"].read_bytes(), "exported": artifacts["exported"].read_bytes(),
            "mlirbc": (fixtures_dir / "tf_mlp.mlirbc").read_bytes()}


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_bytecode_quick(tmp_path, artifacts, fixtures_dir, data):
    sources = _byte_sources(artifacts, fixtures_dir)
    path = tmp_path / "mutated.bin"
    path.write_bytes(data.draw(mutated_bytes(sources[data.draw(st.sampled_from(sorted(sources)))])))
    _check(path, parse_timeout=10)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_bytecode(tmp_path, artifacts, fixtures_dir, data):
    sources = _byte_sources(artifacts, fixtures_dir)
    path = tmp_path / "mutated.bin"
    path.write_bytes(data.draw(mutated_bytes(sources[data.draw(st.sampled_from(sorted(sources)))])))
    _check(path, parse_timeout=10)
