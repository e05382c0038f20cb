"""``Topology``: a cluster spec resolved into numbered devices and dense transfer-charge matrices.

Solvers and the evaluator ask two questions millions of times — "how long does node i take on
device d" and "what does moving this tensor from a to b cost, and who pays" — so the answers are
precomputed as ``D x D`` arrays here instead of being looked up in the spec.

Who pays for a transfer (the model of Tarnawski et al., generalised):

* Devices do not overlap communication with compute: a transfer is time on the timeline (and in
  the pipeline load) of the device(s) that perform it.
* Through host memory (two accelerators on a host without a direct link, or an accelerator and a
  CPU): the sending accelerator pays device->host, the receiving accelerator pays host->device,
  both at the ``hostDevice`` link. A CPU pays nothing on its own host: the data is in its memory.
* Over a direct link (``intraHost``: NVLink, ICI): the receiver pays the transfer (it pulls); the
  sender pays nothing.
* Between hosts (``interHost``): the receiver pays unless it is a CPU, in which case the sender
  does (an accelerator sender), or the receiving CPU itself (CPU to CPU).
* A value sent by one device to several is paid by the sender once, at the most expensive of its
  destinations' charges; each receiving device pays once per value.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from planmap.spec.models import ClusterBody, DeviceKind, Link, SubgraphOutputs

__all__ = ["Device", "Topology", "DTYPE_ALIASES"]

# MLIR element type -> the spec's dtype names (DType)
DTYPE_ALIASES = {
    "f64": "f64", "f32": "f32", "tf32": "tf32", "bf16": "bf16", "f16": "f16",
    "f8E4M3FN": "fp8", "f8E5M2": "fp8", "f8E4M3FNUZ": "fp8", "f8E5M2FNUZ": "fp8", "f8E4M3": "fp8",
    "i8": "int8", "ui8": "int8", "fp8": "fp8", "int8": "int8",
}


@dataclass(frozen=True)
class Device:
    index: int
    name: str  # "node0/gpu3"
    host: int
    host_name: str  # "node0"
    type: int
    type_name: str
    kind: str  # DeviceKind value

    @property
    def is_cpu(self) -> bool:
        return self.kind == DeviceKind.CPU


def _charge(link: Link | None) -> tuple[float, float]:
    """(latency seconds, seconds per byte) of a link; a missing link costs nothing here."""
    if link is None:
        return 0.0, 0.0
    return link.latency * 1e-9, 1.0 / link.bandwidth


def _transfer_charges(cpu: np.ndarray, host: np.ndarray, intra: list[Link | None], hd: tuple[float, float],
                      net: tuple[float, float]) -> tuple[np.ndarray, ...]:
    """The (D, D) charge matrices of the module docstring's rules, as whole-array masks (no D² loop).

    Returns ``send_lat, send_ibw, recv_lat, recv_ibw, send_paid, recv_paid, path_lat, path_ibw``; the
    diagonal and CPU-to-CPU pairs on one host cost nothing.
    """
    n = len(cpu)
    ca, cb = cpu[:, None], cpu[None, :]
    off = ~np.eye(n, dtype=bool)
    same = (host[:, None] == host[None, :]) & off
    cross = (host[:, None] != host[None, :])
    d_lat = np.array([_charge(x)[0] for x in intra])[host][:, None]  # the sender's host's direct link
    d_ibw = np.array([_charge(x)[1] for x in intra])[host][:, None]
    has_direct = np.array([x is not None for x in intra], bool)[host][:, None]
    direct = same & ~ca & ~cb & has_direct
    via_host = same & ~(ca & cb) & ~direct
    s_paid = via_host & ~ca
    r_paid = (via_host & ~cb) | direct
    hops = np.where(ca | cb, 1.0, 2.0)
    p_lat = np.where(direct, d_lat, np.where(via_host, hd[0] * hops, 0.0))
    p_ibw = np.where(direct, d_ibw, np.where(via_host, hd[1] * hops, 0.0))
    p_lat[cross], p_ibw[cross] = net
    net_recv = cross & (~cb | ca)
    net_send = cross & ~net_recv
    r_paid |= net_recv
    s_paid |= net_send
    r_lat = np.where(direct, d_lat, np.where(via_host & ~cb, hd[0], np.where(net_recv, net[0], 0.0)))
    r_ibw = np.where(direct, d_ibw, np.where(via_host & ~cb, hd[1], np.where(net_recv, net[1], 0.0)))
    s_lat = np.where(s_paid & same, hd[0], np.where(net_send, net[0], 0.0))
    s_ibw = np.where(s_paid & same, hd[1], np.where(net_send, net[1], 0.0))
    return s_lat, s_ibw, r_lat, r_ibw, s_paid, r_paid, p_lat, p_ibw


@dataclass(frozen=True, eq=False)
class Topology:
    """Devices of a cluster, numbered in the spec's canonical order, with per-pair transfer charges.

    Arrays: ``device_type``/``device_host`` (D,), ``memory`` (D,, bytes; inf = unlimited),
    ``is_cpu`` (D,), per type ``mem_bw`` (bytes/s), ``efficiency``, ``overhead`` (seconds),
    ``peaks`` ({dtype: FLOP/s} per type); transfer charges (D, D): ``send_lat``/``send_ibw`` and
    ``recv_lat``/``recv_ibw`` (seconds, seconds per byte), ``send_paid``/``recv_paid`` (bool);
    point-to-point routes for collectives: ``path_lat``/``path_ibw``; ``host_io`` (D,): the
    device's subgraph boundaries go through host memory, charged at ``host_lat``/``host_ibw``.
    """

    body: ClusterBody
    devices: tuple[Device, ...]
    type_names: tuple[str, ...]
    type_kinds: tuple[str, ...]
    device_type: np.ndarray
    device_host: np.ndarray
    memory: np.ndarray
    is_cpu: np.ndarray
    mem_bw: np.ndarray
    efficiency: np.ndarray
    overhead: np.ndarray
    peaks: tuple[dict[str, float], ...]
    send_lat: np.ndarray
    send_ibw: np.ndarray
    recv_lat: np.ndarray
    recv_ibw: np.ndarray
    send_paid: np.ndarray
    recv_paid: np.ndarray
    path_lat: np.ndarray
    path_ibw: np.ndarray
    host_io: np.ndarray
    host_lat: float
    host_ibw: float

    @classmethod
    def from_spec(cls, body: ClusterBody) -> Topology:
        types = {t.name: i for i, t in enumerate(body.device_types)}
        devices: list[Device] = []
        intra: list[Link | None] = []
        h = 0
        for host in body.hosts:
            for hi in range(host.count):
                host_name = f"{host.name}{hi}"
                for dev in host.devices:
                    t = body.device_types[types[dev.type]]
                    for di in range(dev.count):
                        devices.append(Device(len(devices), f"{host_name}/{dev.name}{di}", h, host_name,
                                              types[dev.type], t.name, str(t.kind)))
                intra.append(host.intra_host or body.links.intra_host)
                h += 1
        dtype_ = np.array([d.type for d in devices], np.int32)
        host_ = np.array([d.host for d in devices], np.int32)
        cpu = np.array([d.is_cpu for d in devices], bool)
        tdefs = body.device_types
        memory = np.array([math.inf if (m := tdefs[d.type].memory) is None else float(m) for d in devices])
        host_io = np.array([(tdefs[d.type].subgraph_outputs or (
            SubgraphOutputs.HOST_MEMORY if tdefs[d.type].kind == DeviceKind.ACCELERATOR
            else SubgraphOutputs.DEVICE_MEMORY)) == SubgraphOutputs.HOST_MEMORY for d in devices], bool)
        hd = _charge(body.links.host_device)
        net = _charge(body.links.inter_host)
        s_lat, s_ibw, r_lat, r_ibw, s_paid, r_paid, p_lat, p_ibw = _transfer_charges(cpu, host_, intra, hd, net)
        ro = _readonly
        return cls(
            body=body,
            devices=tuple(devices),
            type_names=tuple(t.name for t in tdefs),
            type_kinds=tuple(str(t.kind) for t in tdefs),
            device_type=ro(dtype_), device_host=ro(host_), memory=ro(memory), is_cpu=ro(cpu),
            mem_bw=ro(np.array([float(t.memory_bandwidth) for t in tdefs])),
            efficiency=ro(np.array([t.efficiency for t in tdefs])),
            overhead=ro(np.array([t.op_overhead * 1e-9 for t in tdefs])),
            peaks=tuple({str(p.dtype): float(p.rate) for p in t.peak_flops} for t in tdefs),
            send_lat=ro(s_lat), send_ibw=ro(s_ibw), recv_lat=ro(r_lat), recv_ibw=ro(r_ibw),
            send_paid=ro(s_paid), recv_paid=ro(r_paid), path_lat=ro(p_lat), path_ibw=ro(p_ibw),
            host_io=ro(host_io), host_lat=hd[0], host_ibw=hd[1],
        )

    # ------------------------------------------------------------------------------ queries
    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    def index(self, name: str) -> int:
        """Device index of ``name`` (e.g. "node0/gpu3")."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"unknown device {name!r}; the cluster has {', '.join(self.names[:4])}"
                           f"{', ...' if len(self.names) > 4 else ''}") from None

    def match(self, pattern: str) -> list[int]:
        """Devices whose name matches the glob ``pattern``, or whose type name equals it."""
        return [d.index for d in self.devices if d.type_name == pattern or fnmatch.fnmatchcase(d.name, pattern)]

    def peak(self, type_index: int, dtype: str) -> float:
        """Peak FLOP/s of a device type for an element type (unlisted dtypes get the slowest rate)."""
        peaks = self.peaks[type_index]
        key = DTYPE_ALIASES.get(dtype, dtype)
        return peaks.get(key, min(peaks.values()))

    @cached_property
    def accelerators(self) -> np.ndarray:
        return _readonly(np.flatnonzero(~self.is_cpu).astype(np.int32))

    @cached_property
    def cpus(self) -> np.ndarray:
        return _readonly(np.flatnonzero(self.is_cpu).astype(np.int32))

    def signature(self, d: int) -> tuple:
        """Devices with equal signatures are interchangeable (same type and same host role)."""
        return (int(self.device_type[d]), bool(self.is_cpu[d]))

    # -------------------------------------------------------------------------- collectives
    def _ring(self, devices: np.ndarray) -> tuple[float, float]:
        """(latency, seconds per byte) of the slowest hop of a ring through ``devices``."""
        nxt = np.roll(devices, -1)
        return float(self.path_lat[devices, nxt].max()), float(self.path_ibw[devices, nxt].max())

    def allreduce_time(self, nbytes: float, devices) -> float:
        """min(ring, tree) all-reduce of ``nbytes`` over ``devices``."""
        d = np.asarray(devices, np.int32)
        p = len(d)
        if p <= 1 or nbytes <= 0:
            return 0.0
        lat, ibw = self._ring(d)
        ring = 2 * (p - 1) / p * nbytes * ibw + 2 * (p - 1) * lat
        tree = 2 * math.ceil(math.log2(p)) * (lat + nbytes * ibw)
        return min(ring, tree)

    def allgather_time(self, nbytes: float, devices) -> float:
        """Ring all-gather producing ``nbytes`` on every device (reduce-scatter costs the same)."""
        d = np.asarray(devices, np.int32)
        p = len(d)
        if p <= 1 or nbytes <= 0:
            return 0.0
        lat, ibw = self._ring(d)
        return (p - 1) / p * nbytes * ibw + (p - 1) * lat

    reduce_scatter_time = allgather_time

    def alltoall_time(self, nbytes: float, devices) -> float:
        """All-to-all of a ``nbytes`` tensor spread over ``devices``: each device keeps 1/p of its share and
        sends the rest, so every link carries (p-1)/p of nbytes in total."""
        d = np.asarray(devices, np.int32)
        p = len(d)
        if p <= 1 or nbytes <= 0:
            return 0.0
        lat, ibw = self._ring(d)
        return (p - 1) / p * nbytes * ibw + (p - 1) * lat


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a
