"""Hand-written plans for runtime tests (see planmap.plan.manual): each model's artifact is copied
next to its plans, so a test may change it without touching specs/models."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np

from planmap.frontend.stablehlo import top_level_ops
from planmap.plan.build import op_ranges
from planmap.plan.manual import device_names as devs
from planmap.plan.manual import stage
from planmap.plan.manual import write_plan as _write
from planmap.runtime.artifact import Artifact, entry_function, make_context

__all__ = ["MODELS", "HOSTS", "stage", "devs", "write_plan", "layer_ranges", "megatron_specs", "two_host_plan"]

MODELS = Path(__file__).resolve().parents[2] / "specs" / "models"


def write_plan(tmp: Path, model: str, stages: list[dict], *, name: str = "plan", **kw) -> Path:
    """Copy ``specs/models/<model>.mlir`` into ``tmp`` and write a plan for it there; return the plan path."""
    tmp.mkdir(parents=True, exist_ok=True)
    artifact = tmp / f"{model}.mlir"
    if not artifact.exists():
        shutil.copy(MODELS / f"{model}.mlir", artifact)
    return _write(tmp / f"{model}-{name}.plan.yaml", artifact, stages, **kw)


_SCOPE = re.compile(r"[(/](layer\d+|embed|head|lnf)[)/]")


def layer_ranges(model: str, groups: list[list[str]]) -> list[list[tuple[int, int]]]:
    """Op ranges of ``specs/models/<model>.mlir`` per stage, a stage holding the name scopes in its group
    (``layer0``, ``embed``, ``head``, ...) — forward *and* backward ops, as whole-cluster plans keep them.
    An op outside these scopes goes with the op before it (the first ones with stage 0)."""
    art = Artifact.from_file(MODELS / f"{model}.mlir")
    ctx = make_context()
    module = art.parse(ctx)
    with ctx:
        locs = [str(op.location) for op in top_level_ops(entry_function(module))]
    stage_of = {scope: k for k, group in enumerate(groups) for scope in group}
    per: list[list[int]] = [[] for _ in groups]
    current = 0
    for i, loc in enumerate(locs):
        m = _SCOPE.search(loc)
        if m is not None and m.group(1) in stage_of:
            current = stage_of[m.group(1)]
        per[current].append(i)
    return [op_ranges(np.array(ops)) for ops in per]


def megatron_specs(names: list[str], layers: list[str], axis: str = "tensor") -> dict[int, list]:
    """Megatron's layout of the named layers' weights: column-split wqkv/w1 (and b1), row-split wo/w2;
    for the MLP example, column-split even layers' w and b, row-split odd layers' w."""
    specs: dict[int, list] = {}
    for i, name in enumerate(names):
        layer = next((x for x in layers if f"['{x}']" in name), None)
        if layer is None:
            continue
        odd = int(layer.removeprefix("layer")) % 2 == 1
        if name.endswith(("['wqkv']", "['w1']")) or (name.endswith("['w']") and "blocks" not in name and not odd):
            specs[i] = [None, axis]
        elif name.endswith("['b1']") or (name.endswith("['b']") and "blocks" not in name and not odd):
            specs[i] = [axis]
        elif name.endswith(("['wo']", "['w2']")) or (name.endswith("['w']") and "blocks" not in name and odd):
            specs[i] = [axis, None]
    return specs


HOSTS = [f"node{h}/gpu{i}" for h in range(2) for i in range(8)]


def two_host_plan(tmp: Path, microbatches: int = 2) -> Path:
    """gpt_train over node0/gpu0-7 (embedding, layers 0-1) and node1/gpu0-7 (layers 2-3, tied head), each
    stage Megatron over (data 2, tensor 4), 1F1B; the embedding table, used by both stages, split over
    its first consumer's ``tensor`` axis."""
    names = Artifact.from_file(MODELS / "gpt_train.mlir").arg_names
    first, rest = layer_ranges("gpt_train", [["embed", "layer0", "layer1"], ["layer2", "layer3", "lnf", "head"]])
    tokens, targets, wte = names.index("tokens"), names.index("targets"), names.index("params['embed']['wte']")
    args = {**megatron_specs(names, ["layer0", "layer1", "layer2", "layer3"]), tokens: ["data", None],
            targets: ["data", None], wte: [None, "tensor"]}
    mesh = {"data": 2, "tensor": 4}
    return write_plan(tmp, "gpt_train", [stage(HOSTS[:8], first, mesh), stage(HOSTS[8:], rest, mesh)],
                      data_args=[tokens, targets], args=args, schedule="1f1b", microbatches=microbatches,
                      mode="training", name="two-host")
