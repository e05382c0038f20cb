"""Plan devices -> JAX devices, and each stage's mesh.

A plan names devices by the cluster's names (``node0/gpu3``); the runtime maps them, in the plan
mesh's order, onto ``jax.devices()`` (or onto the list the caller passes). With several JAX
processes (``jax.distributed.initialize``: one process per host) the plan's hosts — the part of a
name before ``/`` — map to processes in order of first appearance, each host's devices onto that
process's local devices, so a stage the planner put on one host runs on one process.

Stage meshes, in order of precedence:

* the stage's own ``mesh`` (axis names and sizes over its devices, in the stage's order);
* a stage on one device: a one-device mesh (nothing to shard);
* a stage over exactly the plan mesh's devices: the plan mesh (an SPMD plan);
* otherwise a replicated (data-parallel) stage: one axis ``data`` over its devices.

A ``data`` axis that the microbatch does not divide into (8 rows over 6 replicas) is split into
``data x replica``, ``data`` the largest size that divides it (``gcd``): each replica group then
computes the same shard — wasted devices, but correct (arguments of a JAX computation must shard
evenly), and better than replicating the whole microbatch on all of them.

Meshes use ``AxisType.Auto`` axes: sharding constraints are hints the partitioner resolves
(``jax.make_mesh`` would default to Explicit axes, which reject them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from planmap.errors import InputError, PlanmapError
from planmap.plan.document import PlanDocument, StageDoc

if TYPE_CHECKING:  # jax is imported lazily
    from jax.sharding import Mesh

__all__ = ["StageMesh", "map_devices", "stage_meshes", "ONE_DEVICE_AXIS"]

ONE_DEVICE_AXIS = "device"


@dataclass(frozen=True, eq=False)
class StageMesh:
    """A stage's ``jax.sharding.Mesh`` and how it was derived (``kind``: own, single, plan, replicated)."""

    mesh: Mesh
    kind: str

    @property
    def axes(self) -> tuple[tuple[str, int], ...]:
        return tuple(zip(self.mesh.axis_names, self.mesh.devices.shape, strict=True))

    @property
    def size(self) -> int:
        return int(self.mesh.devices.size)

    @property
    def platform(self) -> str:
        return self.mesh.devices.flat[0].platform


def _host(name: str) -> str:
    return name.split("/", 1)[0] if "/" in name else ""


def map_devices(doc: PlanDocument, devices: Sequence | None = None) -> dict[str, object]:
    """Plan device name -> JAX device."""
    import jax

    names = list(doc.mesh.devices)
    for st in doc.stages:
        for d in st.devices:
            if d not in names:
                names.append(d)
    if len(set(names)) != len(names):
        raise InputError(f"the plan's mesh lists a device twice: {names}", code="plan-decision")
    if devices is not None:
        pool = list(devices)
        if len(pool) < len(names):
            raise PlanmapError(f"the plan requires {len(names)} devices ({_short(names)}), "
                               f"but {len(pool)} were given")
        return dict(zip(names, pool, strict=False))
    pool = list(jax.devices())
    if len(pool) < len(names):
        raise PlanmapError(
            f"the plan requires {len(names)} devices ({_short(names)}), but JAX sees {len(pool)} "
            f"({pool[0].platform}); on one machine set XLA_FLAGS=--xla_force_host_platform_device_count="
            f"{len(names)} before JAX starts (fake CPU devices), or pass devices=[...]")
    if jax.process_count() > 1:
        by_host = _by_process(names)
        if by_host is not None:
            return by_host
    return dict(zip(names, pool, strict=False))


def _by_process(names: list[str]) -> dict[str, object] | None:
    """Host k of the plan -> process k's local devices, when the plan's hosts fit the processes."""
    import jax

    hosts: list[str] = []
    for n in names:
        if _host(n) not in hosts:
            hosts.append(_host(n))
    if len(hosts) != jax.process_count():
        return None
    local = {p: [d for d in jax.devices() if d.process_index == p] for p in range(jax.process_count())}
    out: dict[str, object] = {}
    for p, host in enumerate(hosts):
        members = [n for n in names if _host(n) == host]
        if len(members) > len(local[p]):
            return None
        out.update(zip(members, local[p], strict=False))
    return out


def _short(names: list[str]) -> str:
    return ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")


def _mesh(devs: list, axis_names: Sequence[str], axis_sizes: Sequence[int]):
    from jax.sharding import AxisType, Mesh

    arr = np.empty(len(devs), dtype=object)
    arr[:] = devs
    return Mesh(arr.reshape(tuple(axis_sizes)), tuple(axis_names), axis_types=(AxisType.Auto,) * len(axis_names))


def _stage_mesh(doc: PlanDocument, st: StageDoc, device_map: dict[str, object], batch: int | None) -> StageMesh:
    devs = [device_map[d] for d in st.devices]
    if len(set(st.devices)) != len(st.devices):
        raise InputError(f"plan stage {st.id} lists a device twice: {st.devices}", code="plan-decision")
    if st.mesh is not None:
        if len(st.mesh.axis_names) != len(st.mesh.axis_sizes):
            raise InputError(f"plan stage {st.id}: its mesh has {len(st.mesh.axis_names)} axis names "
                             f"but {len(st.mesh.axis_sizes)} sizes", code="plan-decision")
        if int(np.prod(st.mesh.axis_sizes)) != len(devs):
            mesh = dict(zip(st.mesh.axis_names, st.mesh.axis_sizes, strict=True))
            raise InputError(f"plan stage {st.id}: its mesh {mesh} "
                             f"requires {int(np.prod(st.mesh.axis_sizes))} devices, but the stage has {len(devs)}",
                             code="plan-decision")
        names, sizes = _fit_batch(st.mesh.axis_names, st.mesh.axis_sizes, batch)
        return StageMesh(_mesh(devs, names, sizes), "own")
    if len(devs) == 1:
        return StageMesh(_mesh(devs, (ONE_DEVICE_AXIS,), (1,)), "single")
    if sorted(st.devices) == sorted(doc.mesh.devices) and int(np.prod(doc.mesh.axis_sizes)) == len(devs):
        plan_devs = [device_map[d] for d in doc.mesh.devices]
        return StageMesh(_mesh(plan_devs, doc.mesh.axis_names, doc.mesh.axis_sizes), "plan")
    names, sizes = _fit_batch(["data"], [len(devs)], batch)
    return StageMesh(_mesh(devs, names, sizes), "replicated")


def _fit_batch(names: Sequence[str], sizes: Sequence[int], batch: int | None) -> tuple[list[str], list[int]]:
    """Split a ``data`` axis the microbatch does not divide into ``data x replica`` (module docstring)."""
    names, sizes = list(names), list(sizes)
    if batch is None or "data" not in names or "replica" in names:
        return names, sizes
    k = names.index("data")
    shards = math.gcd(batch, sizes[k])
    if shards == sizes[k]:
        return names, sizes
    names[k + 1:k + 1] = ["replica"]
    sizes[k:k + 1] = [shards, sizes[k] // shards]
    return names, sizes


def stage_meshes(doc: PlanDocument, device_map: dict[str, object], batch: int | None = None) -> list[StageMesh]:
    """The mesh of each stage, in the plan's stage order (``batch``: the microbatch size)."""
    return [_stage_mesh(doc, st, device_map, batch) for st in doc.stages]
