"""The Python API: planmap.plan / Plan.save / planmap.load_plan / Plan.shardings, on the example specs."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import planmap
from planmap.cli import main
from planmap.errors import PlanmapError

SPEC = "gpt-8dev"


@pytest.fixture(scope="module")
def megatron(specs_dir):
    return planmap.plan(str(specs_dir / f"{SPEC}.yaml"), solver="megatron")


def test_import_planmap_is_cheap():
    code = "import sys, planmap; print(sorted(m for m in ('jax', 'pyomo', 'torch', 'highspy') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_api_plan_saves_the_bytes_the_cli_writes(workdir):
    """planmap.plan(str) + save(str) equals `planmap solve SPEC -o PLAN --solver megatron`, header included."""
    p = planmap.plan(f"specs/{SPEC}.yaml", solver="megatron")
    assert isinstance(p, planmap.Plan) and p.kind == "spmd" and p.path is None
    assert p.result.wall_time > 0
    saved = p.save("api/p.plan.yaml")
    assert main(["solve", f"specs/{SPEC}.yaml", "-o", "cli/p.plan.yaml", "--solver", "megatron", "-q"]) == 0
    assert saved.read_bytes() == (workdir / "cli" / "p.plan.yaml").read_bytes()
    assert main(["check", "api/p.plan.yaml"]) == 1  # --solver megatron overrides the spec's auto: an experiment


def _spec_with_solver(workdir, solver: str) -> str:
    """A copy of the example spec whose solver is ``solver`` (a plan checks only when it follows from its spec)."""
    path = workdir / "specs" / f"{SPEC}-{solver}.yaml"
    text = (workdir / "specs" / f"{SPEC}.yaml").read_text()
    path.write_text(text.replace("    name: auto\n", f"    name: {solver}\n"))
    return str(path)


def test_load_plan_and_save_elsewhere_rebases_inputs(workdir):
    planmap.plan(_spec_with_solver(workdir, "data-parallel")).save(workdir / "a" / "p.plan.yaml")
    p = planmap.load_plan("a/p.plan.yaml")
    assert p.regenerate == []
    out = p.save("b/deeper/p.plan.yaml")
    assert "../../specs/gpt-8dev-data-parallel.yaml -o p.plan.yaml" in out.read_text()
    assert main(["check", "b/deeper/p.plan.yaml"]) == 0
    assert planmap.load_plan(out).text() == out.read_text()
    assert p.path == out and p.text() == out.read_text(), "a saved plan's inputs are relative to its new file"


def test_make_plan_and_save_take_str_paths(workdir):
    from planmap import plan as plan_mod
    from planmap.api import solve_spec
    from planmap.spec import load_spec

    loaded = load_spec(os.path.relpath(_spec_with_solver(workdir, "even")))
    problem, result = solve_spec(loaded)
    doc = plan_mod.make_plan(problem, result.solution, result.evaluation, spec=loaded, plan_path="x.plan.yaml")
    path = plan_mod.save(doc, "x.plan.yaml")  # header lines default to the regenerate command
    assert "planmap solve specs/gpt-8dev-even.yaml -o x.plan.yaml" in path.read_text()
    assert main(["check", "x.plan.yaml"]) == 0


def test_shardings_jit_a_users_function_like_unsharded(megatron):
    """The plan's NamedShardings, passed to the user's own jax.jit on 8 CPU devices, shard the weights
    as planned and give the unsharded result."""
    import jax

    from planmap.examples import models

    gpt = models.get("gpt")
    rng = np.random.default_rng(0)  # random weights of the artifact's shapes (gpt.init runs for seconds)

    def fill(a):
        if np.issubdtype(a.dtype, np.integer):
            return rng.integers(0, models.GPT["vocab"], a.shape).astype(a.dtype)
        return (0.05 * rng.standard_normal(a.shape)).astype(a.dtype)

    args = jax.tree.map(fill, gpt.abstract_args())
    shardings = megatron.shardings(jax.devices(), like=args)
    assert jax.tree.structure(shardings) == jax.tree.structure(args)
    specs = {tuple(s.spec) for s in jax.tree.leaves(shardings)}
    assert (None, "tensor") in specs, "Megatron splits matmul weights over the tensor axis"
    placed = jax.device_put(args, shardings)
    got = jax.jit(gpt.forward, in_shardings=shardings)(*placed)
    want = jax.jit(gpt.forward)(*args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)
    flat = megatron.shardings()
    assert len(flat) == len(jax.tree.leaves(args)) and flat[0].mesh.shape == {"data": 4, "tensor": 2}


def test_single_device_plan_shards_onto_its_device(specs_dir):
    import jax

    single = planmap.plan(specs_dir / f"{SPEC}.yaml", solver="single")
    assert single.kind == "single-device"
    device = single.document.stages[0].devices[0]
    want = jax.devices()[single.document.mesh.devices.index(device)]
    assert {tuple(s.mesh.devices.flat) for s in single.shardings()} == {(want,)}


def test_shardings_refuse_a_pipeline_and_a_wrong_mesh(specs_dir, megatron):
    import jax

    pipe = planmap.plan(specs_dir / f"{SPEC}.yaml", solver="even")
    assert pipe.kind == "pipeline"
    with pytest.raises(PlanmapError, match="planmap.runtime.load"):
        pipe.shardings()
    with pytest.raises(PlanmapError, match="needs 8 devices"):
        megatron.shardings(jax.devices()[:4])
    with pytest.raises(PlanmapError, match="plan's mesh"):
        megatron.shardings(jax.make_mesh((8,), ("data",)))
