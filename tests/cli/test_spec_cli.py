"""`planmap validate` / `schema` / `--version` through the real console entry point."""

from __future__ import annotations

import json
import shutil
import subprocess

from planmap import __version__
from planmap.cli import main


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"planmap {__version__}"


def test_validate_examples_ok(specs_dir, capsys):
    files = [str(p) for p in sorted(specs_dir.glob("*.yaml")) + sorted((specs_dir / "clusters").glob("*.yaml"))]
    assert main(["validate", *files]) == 0
    assert capsys.readouterr().out.count(": ok (") == len(files)


def test_validate_broken_copy_exits_1_with_positions(specs_dir, tmp_path, capsys):
    shutil.copytree(specs_dir, tmp_path / "specs")
    broken = tmp_path / "specs" / "gpt-8dev.yaml"
    broken.write_text(broken.read_text().replace("kind: throughput", "kind: thruput").replace(
        "microbatches: 4", "microbatchs: 4"))
    assert main(["validate", str(broken)]) == 1
    err = capsys.readouterr().err
    assert f"{broken}:15:5: error[unknown-field]: unknown field 'microbatchs'; did you mean 'microbatches'?" in err
    assert f"{broken}:21:11: error[value]: spec.objective.kind: invalid value (got 'thruput'" in err
    assert main(["validate", "--format", "json", str(broken)]) == 1
    diags = json.loads(capsys.readouterr().out)
    assert {(d["line"], d["code"]) for d in diags} == {(15, "unknown-field"), (21, "value")}
    assert main(["validate", "--format", "github", str(broken)]) == 1
    assert capsys.readouterr().out.startswith(f"::error file={broken},line=15,col=5,title=unknown-field::")


def test_schema_check(root, capsys):
    assert main(["schema", "--check", "--out", str(root / "schemas")]) == 0


def test_schema_check_stale(tmp_path, capsys):
    assert main(["schema", "--out", str(tmp_path)]) == 0
    (tmp_path / "cluster.schema.json").write_text("{}")
    assert main(["schema", "--check", "--out", str(tmp_path)]) == 2  # stale, not an error
    assert "make schemas" in capsys.readouterr().err


def test_console_script_user_error_has_no_traceback(tmp_path, planmap_exe):
    exe = planmap_exe
    missing = [str(tmp_path / "a.plan.yaml"), str(tmp_path / "b.plan.yaml")]
    r = subprocess.run([exe, "diff", *missing], capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "error[file-not-found]" in r.stderr
    r = subprocess.run([exe, "--debug", "diff", *missing], capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" in r.stderr
