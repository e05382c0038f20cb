"""Ctrl-C, SIGTERM and SIGHUP during `solve` never replace an existing plan silently, never exit 0 and
leave no temporary file (issue 18, item 2)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_keeps_the_existing_plan_and_exits_128_plus_signal(root, tmp_path, planmap_exe, sig):
    shutil.copytree(root / "specs", tmp_path / "specs")
    plan = tmp_path / "reviewed.plan.yaml"
    plan.write_text("reviewed\n")
    p = subprocess.Popen([planmap_exe, "solve", "specs/gpt-8dev.yaml", "-o", plan.name, "--solver", "ip", "-q"],
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3.0)  # the CLI is importing, loading the model or solving
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 128 + sig, err
    assert plan.read_text() == "reviewed\n"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["reviewed.plan.yaml", "specs"], "no temporary file"


def test_the_guard_turns_signals_into_exceptions_and_restores_handlers():
    import os

    from planmap.cli.signals import SignalGuard, Terminated

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as e, SignalGuard() as guard:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert e.value.exit_status == 143 and guard.received == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before
