"""The GitOps story of issue 17, as a new user lives it in a git repository: commit a spec and its plan,
edit a comment (still up to date), change the cluster (stale, exit 2, with the regenerate command),
re-solve with that command, review the change as a PR comment, and annotate a broken plan for CI."""

from __future__ import annotations

import re
import shlex

import pytest

from planmap.cli import main
from planmap.plan import verify
from tests.gitops.conftest import PLAN, SPEC, git


@pytest.mark.slow
def test_gitops_story(sample_repo, capsys):
    repo = sample_repo
    assert main(["check", PLAN]) == 0

    # a comment, re-indentation and key order in the spec, a comment in the cluster: still up to date
    spec = repo / "specs" / f"{SPEC}.yaml"
    text = spec.read_text()
    name, description = re.search(r"^metadata:\n(  name: .*\n)(  description: .*\n)", text, re.M).groups()
    text = text.replace(name + description, (description + name).replace("  ", "    ", 2))
    spec.write_text("# reviewed by the platform team\n" + text)
    cluster = repo / "specs" / "clusters" / "h100-1x8.yaml"
    cluster.write_text(cluster.read_text().replace("count: 8}", "count: 8}   # one NVLink domain"))
    capsys.readouterr()
    assert main(["check", PLAN]) == 0, capsys.readouterr().err
    verify(PLAN)  # what `planmap run` and planmap.runtime.load require: the plan still runs
    git(repo, "commit", "-qam", "comments")

    # half the GPUs: the plan is stale, and the message says how to regenerate it
    cluster.write_text(cluster.read_text().replace("count: 8}", "count: 4}"))
    capsys.readouterr()
    assert main(["check", PLAN]) == 2
    err = capsys.readouterr().err
    assert "stale: cluster input" in err
    regenerate = re.search(r"regenerate with: (planmap solve .*)$", err, re.M).group(1)
    assert regenerate == f"planmap solve specs/{SPEC}.yaml -o {PLAN}"

    # CI sees the stale plan as an annotation on the plan's cluster line
    assert main(["check", "--format", "github", PLAN]) == 2
    out = capsys.readouterr().out
    line = next(i for i, t in enumerate((repo / PLAN).read_text().splitlines(), 1) if "role: cluster" in t)
    assert f"::warning file={PLAN},line={line},title=planmap check: stale plan::stale: cluster input" in out

    # re-solve with the printed command: up to date again
    assert main(shlex.split(regenerate)[1:] + ["-q"]) == 0
    assert main(["check", PLAN]) == 0

    # the review: the committed plan against the new one, as a PR comment
    old = repo / "plans" / "old" / f"{SPEC}.plan.yaml"
    old.parent.mkdir()
    old.write_text(git(repo, "show", f"HEAD:{PLAN}").replace("../specs/", "../../specs/"))
    capsys.readouterr()
    assert main(["diff", "--format", "markdown", str(old), PLAN]) == 2
    md = capsys.readouterr().out
    assert md.startswith("### planmap diff:")
    assert "op(s) moved" in md and "| layer | ops | from | to |" in md
    moved = [row for row in md.splitlines() if row.startswith("| layer")]
    assert moved and "jit(" not in md, md
    assert "- stages: 8 -> 4" in md
    assert md.index("op(s) moved") < md.index("**Predicted**")
    assert re.search(r"\| objective \| \S+ \| \S+ \| \d+\.\d\d× \|", md), md

    # a hand-edited plan is an error (exit 1), annotated as such
    plan = repo / PLAN
    plan.write_text(re.sub(r"(?m)^  status: \w+$", "  status: interrupted", plan.read_text()))
    assert main(["check", "--format", "github", PLAN]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"::error file={PLAN},line=") and "digest does not match" in out
