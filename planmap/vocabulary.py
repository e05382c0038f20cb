"""The words the spec and the core share: objective, mode, throughput variant, pipeline schedule, memory model.

One definition for the user's document (:mod:`planmap.spec.models`) and for what the solvers read
(:class:`planmap.problem.Problem`), so a solver compares ``problem.objective`` with
``ObjectiveKind.LATENCY`` rather than with a string that might be misspelt. They are ``StrEnum``\\ s:
a member equals its string and renders as it, so plan files and messages read the same.

The classes carry no docstrings on purpose: pydantic copies a class docstring into the generated
JSON Schemas (``schemas/``), which document these enums through the fields that use them.
"""

from __future__ import annotations

import enum

__all__ = ["ObjectiveKind", "Mode", "ThroughputVariant", "Schedule", "MemoryModel"]


# what to minimise: one sample's latency, or the pipelined time per microbatch (bottleneck)
class ObjectiveKind(enum.StrEnum):
    LATENCY = "latency"
    THROUGHPUT = "throughput"


# inference, or a training step (value and grad: gradients and optimizer state take memory)
class Mode(enum.StrEnum):
    INFERENCE = "inference"
    TRAINING = "training"


# how a training pipeline's bottleneck is measured: max(fw + bw) per device, or max fw + max bw
class ThroughputVariant(enum.StrEnum):
    MAX_LOAD = "max-load"
    MAX_FW_PLUS_MAX_BW = "max-fw-plus-max-bw"


# pipeline schedule; ``auto`` (spec only) is resolved by the assembly: 1f1b in training, else gpipe
class Schedule(enum.StrEnum):
    AUTO = "auto"
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"


# what a device's memory holds: each node's size is its whole footprint (Tarnawski et al.), or the
# node's state plus stashed activations and the largest working set of inputs and outputs
class MemoryModel(enum.StrEnum):
    NODE_SIZES = "node-sizes"
    WORKING_SET = "working-set"
