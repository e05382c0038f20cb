"""Bad input never gives a traceback (issue 18, items 4 and 5): each case of the issue's list, and the
input limits (FIFOs, devices, directories, size caps, physical ranges), exits 1 with
``path[:line:col]: error[code]: message`` through the CLI."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from planmap.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPEC = "specs/mlp-latency-cpu4acc.yaml"
CLUSTER = "specs/clusters/cpu-4acc-pcie.yaml"
PLAN = "plans/mlp-latency-cpu4acc.plan.yaml"


@pytest.fixture
def work(root, tmp_path, monkeypatch):
    shutil.copytree(root / "specs", tmp_path / "specs")
    (tmp_path / "plans").mkdir()
    shutil.copy(root / PLAN, tmp_path / "plans")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _edit(src: str, dst: str, old: str, new: str) -> str:
    text = Path(src).read_text(encoding="utf-8")
    assert old in text
    Path(dst).write_text(text.replace(old, new, 1), encoding="utf-8", errors="surrogatepass")
    return dst


def _cluster(name: str, text: str) -> str:
    """A spec like SPEC whose cluster file holds ``text``."""
    Path(f"specs/clusters/{name}.yaml").write_text(text)
    return _edit(SPEC, f"specs/{name}.yaml", "clusters/cpu-4acc-pcie.yaml", f"clusters/{name}.yaml")


def _bandwidth(value: str) -> list[str]:
    text = re.sub(r"bandwidth: [^,}]+", f"bandwidth: {value}", Path(CLUSTER).read_text())
    return ["validate", _cluster("bw", text)]


def _devices(hosts: int, per_host: int) -> list[str]:
    text = Path("specs/clusters/h100-2x8.yaml").read_text()
    text = text.replace("count: 2 ", f"count: {hosts} ").replace("count: 8}", f"count: {per_host}}}")
    return ["validate", _cluster("many", text)]


def _model(text_of) -> list[str]:
    Path("specs/models/bad.mlir").write_text(text_of(Path("specs/models/mlp.mlir").read_text()))
    return ["inspect", "specs/models/bad.mlir"]


def _json(text: str) -> list[str]:
    Path("g.json").write_text(text)
    return ["inspect", "g.json"]


def _plan(cmd: str, old: str, new: str) -> list[str]:
    dst = _edit(PLAN, "plans/bad.plan.yaml", old, new)
    return [cmd, PLAN, dst] if cmd == "diff" else [cmd, dst]


CASES = {
    "long-source": (lambda: ["validate", _edit(SPEC, "specs/long.yaml", "models/mlp.mlir", "m/" + "a" * 300)],
                    "file-not-found"),
    "surrogate-unit": (lambda: ["validate", _edit(CLUSTER, "specs/clusters/s.yaml", "memory: 16GiB",
                                                  'memory: "16\\udc80GiB"')], "encoding"),
    "surrogate-key": (lambda: ["validate", _edit(CLUSTER, "specs/clusters/s.yaml", "memory: 16GiB",
                                                 '"mem\\udc80": 1\n      memory: 16GiB')], "encoding"),
    "tiny-bandwidth": (lambda: _bandwidth("0.1B/s"), "range"),
    "huge-bandwidth": (lambda: _bandwidth("1000PB/s"), "range"),
    "100k-devices": (lambda: _devices(4000, 25), "range"),
    "nested-plan": (lambda: _plan("check", "data_args: [8]", "data_args: " + "[" * 500 + "]" * 500), "yaml-syntax"),
    # a million levels: libyaml's own composer (and PyYAML's CSafeLoader) would crash the process here
    "nested-plan-1M": (lambda: _plan("check", "data_args: [8]", "data_args: " + "[" * 10**6 + "]" * 10**6),
                       "yaml-syntax"),
    "nested-spec-1M": (lambda: ["validate", _edit(SPEC, "specs/deep.yaml", "models/mlp.mlir",
                                                  "[" * 10**6 + "]" * 10**6)], "yaml-syntax"),
    "huge-op-range-diff": (lambda: _plan("diff", "ops: [[0, 19]]", "ops: [[0, 1000000000000]]"), "value"),
    "huge-op-range-explain": (lambda: _plan("explain", "ops: [[0, 19]]", "ops: [[0, 1000000000000]]"), None),
    "duplicate-stage-devices": (lambda: _plan("explain", "devices: [host0/cpu0]", "devices: [host0/cpu0, host0/cpu0]"),
                                None),
    "huge-tensor": (lambda: _model(lambda t: re.sub(r"tensor<\d+x", "tensor<9223372036854775807x", t)), None),
    "json-5000-digits": (lambda: _json('{"format": "planmap.opgraph", "nodes": [' + "1" * 5000 + "]}"), "json"),
    "json-deep": (lambda: _json("[" * 100_000 + "]" * 100_000), "json"),
    "o-onto-dir": (lambda: ["solve", SPEC, "-q", "-o", "specs"], "output"),
    "o-under-file": (lambda: ["solve", SPEC, "-q", "-o", SPEC + "/x.plan.yaml"], "output"),
    "o-empty": (lambda: ["solve", SPEC, "-q", "-o", ""], "output"),
    "fifo-spec": (lambda: (os.mkfifo("f.yaml"), ["validate", "f.yaml"])[1], "not-a-file"),
    "fifo-plan": (lambda: (os.mkfifo("f.plan.yaml"), ["check", "f.plan.yaml"])[1], "not-a-file"),
    "device-model": (lambda: ["inspect", "/dev/zero"], "not-a-file"),
    "directory-spec": (lambda: ["validate", "specs"], "not-a-file"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_a_message_not_a_traceback(work, case, capsys):
    make, code = CASES[case]
    assert main(make()) == 1
    r = capsys.readouterr()
    out = r.out + r.err
    assert "Traceback" not in out
    if code is not None:
        assert re.search(rf"^\S.*: error\[{code}\]: ", out, re.M), out


@pytest.mark.parametrize("kind, var, path, cmd", [
    ("spec", "PLANMAP_MAX_SPEC_BYTES", SPEC, "validate"),
    ("plan", "PLANMAP_MAX_PLAN_BYTES", PLAN, "check"),
    ("artifact", "PLANMAP_MAX_ARTIFACT_BYTES", "specs/models/mlp.mlir", "inspect"),
])
def test_size_caps_name_the_cap_and_the_variable(work, monkeypatch, capsys, kind, var, path, cmd):
    monkeypatch.setenv(var, "100")
    assert main([cmd, path]) == 1
    out = "".join(capsys.readouterr())
    assert f"error[too-large]: the {kind} file is" in out and f"cap of 100 bytes (raise it with {var}=BYTES)" in out
    monkeypatch.setenv(var, str(10**9))
    assert main([cmd, path]) == 0


def test_245_character_output_name_is_written(work):
    out = Path("o") / ("p" * 240 + ".yaml")
    assert main(["solve", SPEC, "-q", "-o", str(out)]) == 0
    assert out.is_file() and not [p for p in out.parent.iterdir() if p.suffix == ".tmp"]


def test_physical_range_is_reported_at_the_value(work, capsys):
    assert main(_bandwidth("0.1B/s")) == 1
    out = "".join(capsys.readouterr())
    assert re.search(r"clusters/bw\.yaml:\d+:\d+: error\[range\]: .*bandwidth: bandwidth 0 B/s is outside the "
                     r"physical range \(expected 1 kB/s to 100 PB/s\)", out), out


def test_plan_input_hashes_both_ways_from_one_read(tmp_path):
    """A spec or cluster input's byte hash and canonical hash come from one read of the file, and equal
    what the staleness check recomputes from the file later."""
    from planmap.io import sha256_input
    from planmap.plan.build import plan_input
    from planmap.plan.canonical import canonical_sha256

    spec = tmp_path / "s.yaml"
    spec.write_bytes((ROOT / "specs" / "clusters" / "h100-1x8.yaml").read_bytes() + b"# a comment\n")
    got = plan_input("cluster", spec, tmp_path)
    assert got.sha256 == sha256_input(spec, "cluster")
    assert got.canonical_sha256 == canonical_sha256(spec)
    assert got.canonical_sha256 == canonical_sha256(ROOT / "specs" / "clusters" / "h100-1x8.yaml")  # meaning only


@pytest.mark.parametrize("argv, code", [
    (["solve", SPEC, "--solver", "no-such-solver", "-o", "x.plan.yaml"], "invalid"),
    (["inspect", "specs/models/missing.mlir"], "file-not-found"),
    (["check", "specs/models/mlp.mlir"], "input"),
    (["inspect", "specs"], "not-a-file"),
])
def test_every_user_error_prints_a_code(work, capsys, argv, code):
    """Errors raised without a code of their own get their class's: ``[file: ]error[code]: message``."""
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"error[{code}]:" in err and "Traceback" not in err, err


def test_render_error_puts_the_code_after_the_file():
    from planmap.errors import InfeasibleError, InputError, StalePlanError, render_error

    assert render_error(InputError("a/b.mlir: cannot parse")) == "a/b.mlir: error[input]: cannot parse"
    assert render_error(InputError("s.yaml:3:4: bad")) == "s.yaml:3:4: error[input]: bad"
    assert render_error(InfeasibleError("gpt cannot fit")) == "error[infeasible]: gpt cannot fit"
    assert render_error(StalePlanError("plan is stale: x")) == "error[stale]: plan is stale: x"
    assert render_error(InputError("p.yaml: error[encoding]: not UTF-8")) == "p.yaml: error[encoding]: not UTF-8"
