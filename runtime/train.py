"""``Trainer``: a training plan's step (accumulated gradients) followed by the optimizer update.

A training artifact is a value-and-grad step: results ``(loss, *grads)``, one gradient per
parameter argument in argument order (what ``jax.value_and_grad(loss)(params, *data)`` exports).
The executable already averages loss and gradients over the plan's microbatches (gradient
accumulation); the trainer then moves each gradient to its parameter's layout and applies the
optimizer there, jitted once per device set with the parameters' own shardings as both input
and output shardings — the update never gathers a sharded parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from planmap.errors import InputError
from planmap.runtime.executable import Executable
from planmap.runtime.optim import Optimizer
from planmap.runtime.transfer import place

__all__ = ["Trainer"]


class Trainer:
    """``loss, params, state = trainer.step(params, state, *data)``.

    ``params``: the artifact's parameter arguments (every non-data argument, in argument order);
    ``data``: its data arguments, with the global batch. ``init(params)`` places the parameters
    where the plan wants them and returns ``(params, state)``.
    """

    def __init__(self, executable: Executable, optimizer: Optimizer, *, loss_output: int = 0):
        self.executable = executable
        self.optimizer = optimizer
        n_args = len(executable.artifact.in_types)
        self.param_args = [i for i in range(n_args) if i not in executable.layouts.data_args]
        outs = executable.artifact.out_types
        self.loss_output = loss_output
        self.grad_outputs = [k for k in range(len(outs)) if k != loss_output][: len(self.param_args)]
        if len(self.grad_outputs) != len(self.param_args) or any(
                outs[k] != executable.artifact.in_types[i]
                for k, i in zip(self.grad_outputs, self.param_args, strict=True)):
            raise InputError("a Trainer requires a value-and-grad artifact whose results are (loss, one gradient per "
                             f"parameter argument, in order); this one has {len(self.param_args)} parameters and "
                             f"results {[str(t) for t in outs]}")
        self.shardings = [self._sharding(i) for i in self.param_args]
        self._groups: dict[Any, list[int]] = {}
        for j, s in enumerate(self.shardings):
            self._groups.setdefault(s.mesh, []).append(j)
        self._updates = {key: self._jit_update([self.shardings[j] for j in members])
                         for key, members in self._groups.items()}
        self.steps = 0

    def _sharding(self, arg: int):
        s = self.executable.input_shardings[arg]
        if s is not None:
            return s
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        return NamedSharding(self.executable.segments[0].mesh.mesh, P())  # an unused parameter

    def _jit_update(self, shardings: list):
        import jax

        opt = self.optimizer

        def update(params, grads, states, t):
            new = [opt.update(p, g, s, t) for p, g, s in zip(params, grads, states, strict=True)]
            return [p for p, _ in new], [s for _, s in new]

        n_state = self._state_size()
        state_sh = [tuple(s for _ in range(n_state)) for s in shardings]
        return jax.jit(update, in_shardings=(shardings, shardings, state_sh, None),
                       out_shardings=(shardings, state_sh))

    def init(self, params: Sequence) -> tuple[list, list]:
        """Parameters placed as the plan wants them, and the optimizer state next to them."""
        import jax

        if len(params) != len(self.param_args):
            raise InputError(f"the model has {len(self.param_args)} parameter arguments, but got {len(params)}")
        placed = [place(p, s) for p, s in zip(params, self.shardings, strict=True)]
        n_state = self._state_size()
        state = [jax.jit(self.optimizer.init, out_shardings=(s,) * n_state)(p) if n_state else ()
                 for p, s in zip(placed, self.shardings, strict=True)]
        return placed, state

    def _state_size(self) -> int:
        import jax

        return len(jax.eval_shape(self.optimizer.init, jax.ShapeDtypeStruct((1,), np.float32)))

    def step(self, params: Sequence, state: Sequence, *data) -> tuple[Any, list, list]:
        """One training step: accumulated (loss, grads) from the plan, then the optimizer update."""
        exe = self.executable
        if len(data) != len(exe.data_args):
            raise InputError(f"the model has {len(exe.data_args)} data arguments, but got {len(data)}")
        args: list = [None] * len(exe.artifact.in_types)
        for i, p in zip(self.param_args, params, strict=True):
            args[i] = p
        for i, x in zip(exe.data_args, data, strict=True):
            args[i] = x
        outs = exe(*args)
        self.steps += 1
        new_params, new_state = list(params), list(state)
        for key, members in self._groups.items():
            update = self._updates[key]
            grads = [place(outs[self.grad_outputs[j]], self.shardings[j]) for j in members]
            ps, ss = update([params[j] for j in members], grads, [state[j] for j in members],
                            np.float32(self.steps))
            for j, p, s in zip(members, ps, ss, strict=True):
                new_params[j], new_state[j] = p, s
        return outs[self.loss_output], new_params, new_state
