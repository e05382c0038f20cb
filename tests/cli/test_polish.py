"""CLI polish: --json summaries, honest wall times, plan titles, compact device labels, --help defaults,
completion, and the live progress line's ticker."""

from __future__ import annotations

import json
import threading
import time

import pytest

import planmap
from planmap.cli import main
from planmap.cli.summary import LiveProgress
from planmap.explain import STEP_DEFINITION, compact_devices, plan_title


class _Recorder:
    """A status line that remembers what was shown and when (the rich status's ``update``)."""

    def __init__(self):
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def update(self, text: str) -> None:
        with self._lock:
            self.lines.append((time.perf_counter(), text))


def test_solve_and_explain_json_titles_and_wall_time(workdir, capsys):
    assert main(["solve", "specs/gpt-8dev.yaml", "--solver", "data-parallel", "--json"]) == 0
    solved = json.loads(capsys.readouterr().out)
    assert solved["kind"] == "SPMD over mesh data=8, 4 microbatches", "a data-parallel plan is not a pipeline"
    assert solved["plan"] == "plans/gpt-8dev.plan.yaml" and solved["wall_time_s"] > 0
    assert solved["predicted"]["step_definition"] == STEP_DEFINITION
    assert solved["predicted"]["step_time_s"] == pytest.approx(4 * solved["predicted"]["objective_s"])
    assert main(["explain", "plans/gpt-8dev.plan.yaml", "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["wall_time_s"] is None and explained["stages"] == solved["stages"]
    assert main(["explain", "plans/gpt-8dev.plan.yaml"]) == 0
    text = capsys.readouterr().out
    assert "solve time not recorded in the plan" in text and "0.00s" not in text
    assert "node0/gpu0-7" in text and STEP_DEFINITION in text


def test_plan_titles_name_the_kind(specs_dir):
    pipe = planmap.plan(specs_dir / "gpt-8dev.yaml", solver="even")
    assert plan_title(pipe.document).startswith("gpipe pipeline, ") and pipe.document.schedule.kind == "gpipe"
    single = planmap.plan(specs_dir / "gpt-8dev.yaml", solver="single")
    assert plan_title(single.document) == "single device node0/gpu0, 4 microbatches"


def test_compact_devices():
    names = [f"node0/gpu{i}" for i in range(8)] + ["node1/gpu0", "node1/gpu1", "cpu", "node1/gpu3"]
    assert compact_devices(names) == "node0/gpu0-7,node1/gpu0-1,cpu,node1/gpu3"
    assert compact_devices(["node0/gpu2", "node0/gpu1"]) == "node0/gpu2,node0/gpu1"


def test_help_shows_defaults_and_completion(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # one option per line
    assert main(["solve", "--help"]) == 0
    text = capsys.readouterr().out
    assert "plans/<spec file stem>.plan.yaml" in text and "the spec's solver.timeLimit" in text
    assert main(["--help"]) == 0
    assert "--install-completion" in capsys.readouterr().out


def test_live_progress_ticks_every_half_second_without_solver_reports():
    """Between solver callbacks (which can be minutes apart) the line still updates at least once a second,
    with the elapsed time and the latest incumbent, bound and gap."""
    rec = _Recorder()
    with LiveProgress(rec, interval=0.2) as progress:
        progress.set_phase("solving")
        progress(elapsed=0.0, incumbent=2e-3, bound=1e-3)
        time.sleep(1.5)
    times = [t for t, _ in rec.lines]
    assert len(times) >= 5 and max(b - a for a, b in zip(times, times[1:], strict=False)) < 1.0
    last = rec.lines[-1][1]
    assert last.startswith("solving: ") and "incumbent 2ms" in last and "bound 1ms" in last and "gap 50.00%" in last
    elapsed = [float(text.split(":")[1].split("s,")[0]) for _, text in rec.lines[1:]]
    assert elapsed == sorted(elapsed) and elapsed[-1] >= 1.0
    n = len(rec.lines)
    time.sleep(0.5)
    assert len(rec.lines) == n, "the ticker stops with the solve"


@pytest.mark.slow
def test_live_progress_does_not_change_the_plan(specs_dir):
    """The IP reports incumbents and bounds to the live line while the ticker redraws it; the plan is the
    same bytes as a solve without any progress display."""
    spec = specs_dir / "mlp-latency-cpu4acc.yaml"
    rec = _Recorder()
    with LiveProgress(rec, interval=0.2) as progress:
        shown = planmap.plan(spec, solver="ip", progress=progress)
    quiet = planmap.plan(spec, solver="ip")
    assert any("incumbent" in text for _, text in rec.lines), "the IP reported its incumbent"
    assert shown.text("p.plan.yaml") == quiet.text("p.plan.yaml")


def test_picture_and_cli_say_the_same_step_time(specs_dir):
    """The PNG's title gives the evaluator's step time (the CLI's) with its definition, and says when the
    simulated schedule it draws takes another time."""
    from planmap.explain import timeline

    p = planmap.plan(specs_dir / "gpt-8dev.yaml", solver="even")
    r = p.result
    blocks, title = timeline(p.document, r.problem, r.solution, r.evaluation)
    assert f"step {r.evaluation.step_time * 1e3:.3g} ms" in title and STEP_DEFINITION in title
    assert title.startswith("gpipe pipeline, ") and len(blocks.rows) == len(p.document.stages)
    assert ("the timeline simulates the schedule" in title) == (
        abs(blocks.makespan - r.evaluation.step_time) > 1e-9 * r.evaluation.step_time)
