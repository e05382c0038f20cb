"""Two local JAX processes x 4 fake CPU devices (gloo collectives) run plans that span both.

The cluster's hosts (``h0/...``, ``h1/...``) map to the two processes. Two plans: an SPMD plan
(data x tensor parallel over a 2 x 4 mesh across both processes, with 2 microbatches), and a
2-stage pipeline whose stages each take 2 devices of every host (values move between stages shard
by shard, within each process). Both must equal the MLP on one device (rtol=atol=1e-5). And the
whole-cluster shape: 2 processes x 8 devices, one sharded gpt_train stage per process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from planmap.examples.models import mlp
from tests.runtime.conftest import single_device
from tests.runtime.plans import stage, two_host_plan, write_plan

HOSTS = [f"h{h}/d{i}" for h in range(2) for i in range(4)]
WORKER = Path(__file__).with_name("mp_worker.py")
STAGE_WORKER = Path(__file__).with_name("mp_stage_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(worker: Path, argv: list[str], timeout: float) -> None:
    """Run ``worker PROCESS_ID PORT *argv`` as processes 0 and 1 of a local cluster; fail unless both exit 0."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    procs = [subprocess.Popen([sys.executable, str(worker), str(p), str(port), *argv],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
             for p in range(2)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()  # JAX traps SIGTERM; a hung worker only dies by SIGKILL
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-3000:] for log in logs)


@pytest.mark.slow
def test_two_processes_match_one_device(tmp_path):
    spmd = write_plan(tmp_path, "mlp", [stage(HOSTS, [(0, 19)])], data_args=[8], devices=HOSTS,
                      mesh={"data": 2, "model": 4}, schedule="gpipe", microbatches=2,
                      args={8: ["data", None], 1: [None, "model"], 0: ["model"], 3: ["model", None]},
                      values={(4, 0): ["data", "model"]}, name="spmd")
    a, b = [HOSTS[0], HOSTS[1], HOSTS[4], HOSTS[5]], [HOSTS[2], HOSTS[3], HOSTS[6], HOSTS[7]]
    pipe = write_plan(tmp_path, "mlp", [stage(a, [(0, 9)]), stage(b, [(9, 19)])], data_args=[8], devices=HOSTS,
                      schedule="gpipe", microbatches=2, name="pipe")
    out = tmp_path / "out.npz"
    run_workers(WORKER, [str(out), str(spmd), str(pipe)], timeout=240)
    got = np.load(out)
    import jax

    params = mlp.init(jax.random.PRNGKey(0))
    x = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (64, 256), np.float32))
    ref = single_device(mlp.forward, params, x)
    for k in range(2):
        np.testing.assert_allclose(got[f"plan{k}"], ref, rtol=1e-5, atol=1e-5)
        assert list(got[f"plan{k}_processes"]) == [0, 1]  # the plan's segments span both processes


@pytest.mark.slow
def test_one_stage_per_process_verifies(tmp_path):
    """The 2-host plan (tests/runtime/plans.py: gpt_train, one (data 2, tensor 4) Megatron stage per host)
    on 2 processes x 8 fake CPU devices: node0 -> process 0, node1 -> process 1; activations and their
    gradients cross between the processes (through host memory on CPU, see planmap.runtime.transfer).
    Outputs are judged like ``planmap run --verify`` (planmap.runtime.verify's tolerances)."""
    out = tmp_path / "out.npz"
    run_workers(STAGE_WORKER, [str(out), str(two_host_plan(tmp_path))], timeout=300)
    got = np.load(out)
    assert got["ok"].all() and len(got["ok"]) == 45, got["max_abs"]  # loss and 44 gradients
    assert got["stage_processes"].tolist() == [[0], [1]]
    assert got["wte_stages"].tolist() == [0, 1]  # the tied embedding: an argument of both stages
