"""``LogicalMesh``: a device set factorised into 1–3 axes, with the cost of collectives along each axis.

Devices are laid out row-major over the axes, outermost first (JAX order): the LAST axis is the
innermost one and spans consecutive devices. An axis's latency and seconds per byte are those of the
slowest ring hop over any group of devices along it (the same ring as ``Topology._ring``), so a
collective on one axis costs exactly what ``Topology.allreduce_time`` and friends charge for one of
its groups on a homogeneous cluster. :func:`logical_meshes` enumerates the factorisations that
respect the host hierarchy: no axis straddles a host boundary, so inner axes stay on the fast
intra-host links and outer ones cross hosts.

Collectives over several axes are applied axis by axis (summed) with the bytes unchanged — a
documented approximation (a real implementation may fuse them into one larger ring).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planmap.cluster import Topology

__all__ = ["LogicalMesh", "logical_meshes", "COLLECTIVES"]

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")


@dataclass(frozen=True, eq=False)
class LogicalMesh:
    """Axes (sizes outermost first), devices in row-major mesh order, per-axis link costs and scope.

    ``latency[a]`` (s) and ``inv_bw[a]`` (s/byte): the slowest ring hop of any device group along
    axis ``a``; ``scope[a]``: "intra" when every group stays inside one host, else "inter".
    """

    axis_sizes: tuple[int, ...]
    devices: np.ndarray
    latency: tuple[float, ...]
    inv_bw: tuple[float, ...]
    scope: tuple[str, ...]

    @classmethod
    def build(cls, topology: Topology, axis_sizes: tuple[int, ...], devices) -> LogicalMesh:
        """The mesh of ``devices`` (row-major order) with ``axis_sizes``; link costs from ``topology``."""
        devs = np.asarray(devices, np.int32).copy()
        sizes = tuple(int(s) for s in axis_sizes)
        if math.prod(sizes) != len(devs):
            raise ValueError(f"LogicalMesh requires prod(axis_sizes) == number of devices, "
                             f"but got {sizes} for {len(devs)} devices")
        devs.setflags(write=False)
        lat, ibw, scope = [], [], []
        grid = devs.reshape(sizes)
        for a, s in enumerate(sizes):
            groups = np.moveaxis(grid, a, -1).reshape(-1, s)
            nxt = np.roll(groups, -1, axis=1)
            lat.append(float(topology.path_lat[groups, nxt].max()) if s > 1 else 0.0)
            ibw.append(float(topology.path_ibw[groups, nxt].max()) if s > 1 else 0.0)
            hosts = topology.device_host[groups]
            scope.append("intra" if np.all(hosts == hosts[:, :1]) else "inter")
        return cls(sizes, devs, tuple(lat), tuple(ibw), tuple(scope))

    @property
    def num_axes(self) -> int:
        return len(self.axis_sizes)

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def shape(self) -> str:
        return "x".join(map(str, self.axis_sizes))

    @cached_property
    def key(self) -> tuple:
        """Hashable identity (sizes and device order)."""
        return self.axis_sizes, tuple(self.devices.tolist())

    def groups(self, axis: int) -> np.ndarray:
        """(devices / size, size) device ids of each group along ``axis`` (the other axes fixed)."""
        return np.moveaxis(self.devices.reshape(self.axis_sizes), axis, -1).reshape(-1, self.axis_sizes[axis])

    # ------------------------------------------------------------------------------ collectives
    def collective(self, kind: str, nbytes, axes) -> np.ndarray:
        """Seconds of collective ``kind`` over ``axes`` (an axis or an iterable of axes), vectorised
        over ``nbytes``. all-gather: bytes per device AFTER the gather; reduce-scatter: BEFORE the
        scatter; all-to-all and all-reduce: bytes per device. Several axes: summed axis by axis."""
        b = np.asarray(nbytes, float)
        total = np.zeros(b.shape)
        for a in ([axes] if isinstance(axes, int | np.integer) else axes):
            total = total + _one_axis(kind, b, self.axis_sizes[a], self.latency[a], self.inv_bw[a])
        return total

    def allreduce(self, nbytes, axes) -> np.ndarray:
        return self.collective("all-reduce", nbytes, axes)

    def allgather(self, nbytes, axes) -> np.ndarray:
        return self.collective("all-gather", nbytes, axes)

    def reduce_scatter(self, nbytes, axes) -> np.ndarray:
        return self.collective("reduce-scatter", nbytes, axes)

    def alltoall(self, nbytes, axes) -> np.ndarray:
        return self.collective("all-to-all", nbytes, axes)

    def __repr__(self) -> str:
        return f"LogicalMesh({self.shape}, scope={'/'.join(self.scope)})"


def _one_axis(kind: str, b: np.ndarray, p: int, lat: float, ibw: float) -> np.ndarray:
    if p <= 1:
        return np.zeros(b.shape)
    if kind == "all-reduce":
        ring = 2 * (p - 1) / p * b * ibw + 2 * (p - 1) * lat
        tree = 2 * math.ceil(math.log2(p)) * (lat + b * ibw)
        t = np.minimum(ring, tree)
    elif kind in ("all-gather", "reduce-scatter", "all-to-all"):
        t = (p - 1) / p * b * ibw + (p - 1) * lat
    else:
        raise ValueError(f"unknown collective {kind!r}; expected one of {', '.join(COLLECTIVES)}")
    return np.where(b > 0, t, 0.0)


def _factorisations(n: int, max_axes: int = 3) -> list[tuple[int, ...]]:
    """Ordered factorisations of ``n`` into 1..max_axes factors > 1, by number of axes then sizes."""
    divisors = [d for d in range(2, n + 1) if n % d == 0]
    out = []
    for k in range(1, max_axes + 1):
        for sizes in itertools.product(divisors, repeat=k):
            if math.prod(sizes) == n:
                out.append(sizes)
    return out


def logical_meshes(topology: Topology, devices=None) -> list[LogicalMesh]:
    """Every hierarchy-respecting factorisation of ``devices`` (default: the accelerators, or all
    devices of a CPU-only cluster) into 1–3 axes, in a deterministic order (fewer axes first, then
    sizes). Devices are sorted by (host, index); every host of the set must hold the same number ``d``
    of devices of one device type (else ``[]``), and every cumulative product of axis sizes from the
    inner side must divide ``d`` or be a multiple of it. One device: a single axis of size 1."""
    if devices is None:
        devices = topology.accelerators if len(topology.accelerators) else np.arange(topology.num_devices)
    devs = np.asarray(sorted({int(d) for d in devices}, key=lambda d: (int(topology.device_host[d]), d)), np.int32)
    if len(devs) == 0:
        return []
    if len(np.unique(topology.device_type[devs])) != 1:
        return []
    hosts, counts = np.unique(topology.device_host[devs], return_counts=True)
    if len(np.unique(counts)) != 1:
        return []
    d = int(counts[0])
    if len(devs) == 1:
        return [LogicalMesh.build(topology, (1,), devs)]
    meshes = []
    for sizes in _factorisations(len(devs)):
        cum = np.cumprod(sizes[::-1])
        if all(d % c == 0 or c % d == 0 for c in cum.tolist()):
            meshes.append(LogicalMesh.build(topology, sizes, devs))
    return meshes
