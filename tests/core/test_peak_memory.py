"""A plan's memory is the program model's (planmap.peak_memory): what it records per stage is the liveness model of
the stage's compiled programs (planmap.program_memory), and solve judges feasibility by it, not by the solvers'
linear terms: when those fit and the program model does not, solve takes the next microbatch candidate or fails
naming the stage, its bytes and the capacity."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from planmap import plan as plan_mod
from planmap.assemble import build_problem, plan_remat
from planmap.errors import InfeasibleError
from planmap.evaluate import evaluate
from planmap.microbatching import as_planned
from planmap.program_memory import plan_program_bytes
from planmap.solve import solve
from planmap.spec import load_spec
from tests.core.test_microbatching import _spec


@pytest.mark.parametrize("name", ["gpt-train-8dev", "cnn-tpu"])
def test_a_plan_records_the_program_memory_of_each_stage(root, name):
    path = root / "plans" / f"{name}.plan.yaml"
    doc = plan_mod.load(path).document
    spec = load_spec(root / "specs" / f"{name}.yaml")
    problem = build_problem(spec, remat=plan_remat(spec, doc))
    solution = plan_mod.to_solution(problem, doc)
    programs = plan_program_bytes(as_planned(problem, solution), solution)
    recorded = doc.predicted.stages
    assert [s.stage for s in recorded] == list(range(len(doc.stages)))
    for st, prog in zip(recorded, programs, strict=True):
        assert (st.params, st.inputs, st.outputs, st.temp) == tuple(round(prog[k]) for k in
                                                                    ("params", "inputs", "outputs", "temp"))
        assert st.memory == st.params + st.inputs + st.outputs + st.temp + st.optimizer + st.state + st.stash
    held = {d.device: d.memory for d in doc.predicted.devices}
    for st, sd in zip(recorded, doc.stages, strict=True):
        assert all(abs(held[d] - st.memory) <= 1 for d in sd.devices)  # one stage per device in these plans
    if name == "gpt-train-8dev":  # 1F1B: the first stage holds 4 microbatches, the last one
        assert [s.in_flight for s in recorded] == [4, 4, 3, 2, 1] and recorded[0].stash > 0 == recorded[-1].stash
        # not the solvers' linear terms (0.48-1.20 of XLA per program)
        linear = evaluate(as_planned(problem, solution), solution).memory
        assert not np.allclose(sorted(held.values()), sorted(linear[linear > 0]))


def _tight(root: Path, tmp_path: Path, microbatches: str, capacity: float):
    """The CNN training model on the 4-accelerator spec of ``tests.core.test_microbatching`` with the usable
    memory of the last two accelerators (host0/acc2, host0/acc3) set to ``capacity`` bytes."""
    spec = _spec(root, tmp_path, mb=microbatches, schedule="1f1b")
    shutil.copy(root / "specs" / "models" / "cnn_train.mlir", tmp_path / "models" / "cnn_train.mlir")
    spec.write_text(spec.read_text().replace("mlp_train.mlir", "cnn_train.mlir"))
    problem = build_problem(load_spec(spec))
    memory = np.array(problem.topology.memory, float)
    memory[3:] = capacity / (1 - problem.memory_headroom)
    return replace(problem, topology=replace(problem.topology, memory=memory))


def test_solve_takes_the_next_microbatch_count_when_the_program_model_does_not_fit(root, tmp_path):
    # the dp plan at M=8 puts a stage on acc2 or acc3 whose linear terms are 5.01 MB and program model 5.96 MB
    problem = _tight(root, tmp_path, "[1, 2, 4, 8]", 5.5e6)
    result = solve(problem, "dp")
    linear = evaluate(result.problem.decide(8, result.problem.schedule),
                      replace(result.solution, microbatches=8))
    assert linear.feasible  # the linear terms fit at the fastest candidate, M=8 ...
    assert result.problem.microbatches == 2 and result.evaluation.feasible  # ... the program model only at M<=2
    ev = result.evaluation
    assert ev.peak is not None and (ev.memory <= ev.capacity).all() and ev.memory[3] > 5e6
    message = result.solution.certificate.message
    assert "M=2 1.05" in message and "M=4 infeasible" in message and "M=8 infeasible" in message


def test_solve_fails_naming_the_stage_when_no_candidate_fits_the_program_model(root, tmp_path):
    problem = _tight(root, tmp_path, "1", 4.0e6)
    with pytest.raises(InfeasibleError) as e:
        solve(problem, "dp")
    text = str(e.value)
    assert "the solver's linear memory terms fit" in text and "under the program model" in text
    assert "host0/acc2 needs 3.93MiB of 3.81MiB usable (stage 2: 3.93MiB = program" in text
