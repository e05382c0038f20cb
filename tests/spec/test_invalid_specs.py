"""A table of invalid specs: each must be reported at the exact line:col, with its error code."""

from __future__ import annotations

import pytest

from planmap.spec import SpecError, load_spec

BASE = """\
apiVersion: planmap.dev/v1alpha1
kind: PlanSpec
metadata:
  name: demo
spec:
  model:
    source: model.mlir
    mode: inference
    microbatches: 2
    globalBatch: 8
  cluster:
    deviceTypes:
      - name: g
        kind: gpu
        memory: 80GiB
        memoryBandwidth: 3TB/s
        peakFlops: [{dtype: bf16, rate: 989TFLOP/s}]
    hosts:
      - name: node
        devices: [{name: gpu, type: g, count: 4}]
    links:
      intraHost: {bandwidth: 450GB/s, latency: 2us}
  objective:
    kind: throughput
  solver:
    timeLimit: 10s
  constraints:
    placement: contiguous
"""


def edit(**lines: str | None) -> str:
    """Replace 1-based lines (l7="...") or delete them (None); l8_after inserts after line 8."""
    out = []
    for i, line in enumerate(BASE.splitlines(), start=1):
        key = f"l{i}"
        if key in lines:
            if lines[key] is not None:
                out.append(lines[key])
        else:
            out.append(line)
        if f"l{i}_after" in lines:
            out.append(lines[f"l{i}_after"])
    return "\n".join(out) + "\n"


# (id, text, expected line, marker whose first occurrence on that line gives the column, code, fragment)
CASES = [
    ("api-version", edit(l1="apiVersion: planmap.dev/v2"), 1, "planmap.dev/v2", "api-version", "v1alpha1"),
    ("kind", edit(l2="kind: PlanSpecc"), 2, "PlanSpecc", "kind", "did you mean 'PlanSpec'"),
    ("unknown-field", edit(l8="    mdoe: inference"), 8, "mdoe", "unknown-field", "did you mean 'mode'"),
    ("missing-field", edit(l7=None), 6, "model", "missing-field", "'source'"),
    ("unit-kind", edit(l15="        memory: 80GB/s"), 15, "80GB/s", "unit", "is a bandwidth, but a size"),
    ("enum", edit(l24="    kind: speed"), 24, "speed", "value", "'latency', 'throughput'"),
    ("type", edit(l10="    globalBatch: many"), 10, "many", "type", "an integer"),
    ("range", edit(l26="    threads: 0"), 26, "0", "value", ">= 1"),
    ("duplicate-dtype",
     edit(l17="        peakFlops: [{dtype: bf16, rate: 1TFLOP/s}, {dtype: bf16, rate: 2TFLOP/s}]"), 17,
     "bf16, rate: 2", "duplicate-name", "listed twice"),
    ("unknown-device-type", edit(l20="        devices: [{name: gpu, type: h100, count: 4}]"), 20, "h100",
     "reference", "unknown device type"),
    ("missing-model-file", edit(l7="    source: missing.mlir"), 7, "missing.mlir", "file-not-found", "does not exist"),
    ("yaml-syntax", edit(l8="    mode: [inference"), 9, ":", "yaml-syntax", "expected ',' or ']'"),
    ("duplicate-key", edit(l8_after="    mode: training"), 9, "mode", "duplicate-key", "appears twice"),
    ("interhost-missing", edit(l19="      - name: node\n        count: 2"), 22, "links", "missing-field", "interHost"),
    ("latency-training", edit(l8="    mode: training", l24="    kind: latency"), 24, "latency", "value",
     "inference only"),
    ("batch-divisible", edit(l10="    globalBatch: 7"), 10, "7", "value", "not divisible"),
    ("pin-unknown-device", edit(l28="    pins: [{ops: '*', device: 'tpu*'}]"), 28, "'tpu*'", "reference",
     "matches no device"),
    ("bad-name", edit(l4="  name: has space"), 4, "has space", "value", "invalid name"),
    ("list-expected", edit(l18="    hosts: node", l19=None, l20=None), 18, "node", "type", "a list"),
    ("memory-required", edit(l15=None), 13, "name", "missing-field", "needs 'memory'"),
    ("unit-garbage", edit(l26="    timeLimit: 5 parsecs"), 26, "5 parsecs", "unit", "unknown duration unit"),
    ("host-device-link", edit(l21="    links: {}", l22=None), 21, "links", "missing-field", "hostDevice"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_invalid_spec_position_and_code(tmp_path, case):
    _, text, line, marker, code, fragment = case
    (tmp_path / "model.mlir").write_text("module {}\n")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    col = text.splitlines()[line - 1].index(marker) + 1
    messages = [str(d) for d in err.value.diagnostics]
    expected_prefix = f"{path}:{line}:{col}: error[{code}]: "
    hits = [m for m in messages if m.startswith(expected_prefix)]
    assert hits, f"no diagnostic at {line}:{col} [{code}]; got:\n" + "\n".join(messages)
    assert any(fragment in m for m in hits), hits


def test_base_is_valid(tmp_path):
    (tmp_path / "model.mlir").write_text("module {}\n")
    (tmp_path / "spec.yaml").write_text(BASE)
    spec = load_spec(tmp_path / "spec.yaml")
    assert spec.spec.cluster.device_names() == [f"node0/gpu{i}" for i in range(4)]
    assert spec.spec.solver.time_limit == 10 * 10**9
    assert spec.model_path == (tmp_path / "model.mlir").resolve()


def test_all_errors_reported_at_once(tmp_path):
    (tmp_path / "model.mlir").write_text("module {}\n")
    text = edit(l8="    mdoe: inference", l15="        memory: 80GB/s", l24="    kind: speed")
    (tmp_path / "spec.yaml").write_text(text)
    with pytest.raises(SpecError) as err:
        load_spec(tmp_path / "spec.yaml")
    codes = sorted(d.code for d in err.value.diagnostics)
    assert codes == ["unit", "unknown-field", "value"]


def test_encoding_error_position(tmp_path):
    (tmp_path / "model.mlir").write_text("module {}\n")
    data = BASE.encode().replace(b"name: demo", b"name: d\xffmo")
    (tmp_path / "spec.yaml").write_bytes(data)
    with pytest.raises(SpecError) as err:
        load_spec(tmp_path / "spec.yaml")
    (d,) = err.value.diagnostics
    assert (d.line, d.col, d.code) == (4, 10, "encoding")


def test_alias_bomb_is_bounded(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError) as err:
        load_spec(tmp_path / "bomb.yaml")
    assert [d.code for d in err.value.diagnostics] == ["alias-limit"]


def test_cluster_reference_errors_point_into_cluster_file(tmp_path):
    (tmp_path / "model.mlir").write_text("module {}\n")
    cluster = tmp_path / "c.yaml"
    cluster.write_text("apiVersion: planmap.dev/v1alpha1\nkind: Cluster\nmetadata: {name: c}\nspec:\n"
                       "  deviceTypes: [{name: g, kind: gpu, memory: 1GiB, memoryBandwidth: 1GB/s,\n"
                       "                 peakFlops: [{dtype: f32, rate: 1TFLOP/s}]}]\n"
                       "  hosts: [{name: h, devices: [{name: d, type: nope}]}]\n")
    text = "\n".join(BASE.splitlines()[:10] + ["  cluster: c.yaml"] + BASE.splitlines()[22:]) + "\n"
    (tmp_path / "spec.yaml").write_text(text)
    with pytest.raises(SpecError) as err:
        load_spec(tmp_path / "spec.yaml")
    (d,) = err.value.diagnostics
    assert d.file == str(cluster) and (d.line, d.code) == (7, "reference")


def test_missing_cluster_file(tmp_path):
    (tmp_path / "model.mlir").write_text("module {}\n")
    text = "\n".join(BASE.splitlines()[:10] + ["  cluster: nothere.yaml"] + BASE.splitlines()[22:]) + "\n"
    (tmp_path / "spec.yaml").write_text(text)
    with pytest.raises(SpecError) as err:
        load_spec(tmp_path / "spec.yaml")
    (d,) = err.value.diagnostics
    assert (d.line, d.col, d.code) == (11, 12, "file-not-found")


@pytest.mark.parametrize("text,code", [("", "empty"), ("~\n", "empty"), ("&#", "empty"), ("- a\n- b\n", "type"),
                                       ("a: 1\n---\nb: 2\n", "yaml-syntax"),
                                       ("x: !!python/object:os.system ls\n", "yaml-tag")])
def test_document_level_errors(tmp_path, text, code):
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(SpecError) as err:
        load_spec(tmp_path / "s.yaml")
    assert code in [d.code for d in err.value.diagnostics]
