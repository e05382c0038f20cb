"""Profiled graphs shaped like the networks of Tarnawski et al.'s benchmarks, built in code.

The paper's inputs (BERT, ResNet-50, GNMT, Inception-v3 at layer and operator granularity) are
profiles of real deployments; planmap does not ship them. These generators build graphs with the
same structure and statistics instead, so the solvers can be measured at the paper's scales:

* times in seconds per node for "accelerator" and "cpu" (the CPU ``cpu_factor`` times slower:
  about 23x for BERT operators, 10x for the CNN layers), with per-op jitter;
* one output value per node whose transfer time is its bytes over ~2.1 GB/s (the paper's
  host-link rate: a 9.4 MB activation costs 4.4 ms), so transfers are as expensive relative to
  compute as there (often more than the op itself);
* ``size`` (state bytes) per node as in the paper's files: weights on the weight nodes, the output
  activation on compute nodes; weight nodes take no time and share a colocation class with the op
  that reads them (operator granularity);
* ``layer`` ids per repeated block.

Every generator is deterministic for a given ``seed``. :func:`net_topology` returns the paper's
"1 CPU + k accelerators through host memory" cluster with memory set so the model fills a given
share of it (tight memory forces the placement to use many accelerators).
"""

from __future__ import annotations

import math

import numpy as np

from planmap.graph import OpGraph
from planmap.workloads.graphs import paper_topology, profiled_graph

__all__ = ["bert", "resnet50", "gnmt", "inception_v3", "net_topology", "NETWORKS", "HOST_LINK"]

HOST_LINK = 2.147e9  # bytes/s of the host link in the paper's profiles (9437184 B -> 4.39 ms)
MB = 2**20


class _Net:
    """Accumulates nodes in topological order (inputs always exist before their consumer)."""

    def __init__(self, name: str, seed: int, cpu_factor: float):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.cpu_factor = cpu_factor
        self.acc: list[float] = []
        self.cpu: list[float] = []
        self.out: list[float] = []
        self.size: list[float] = []
        self.layer: list[int] = []
        self.coloc: list[int] = []
        self.edges: list[tuple[int, int]] = []
        self.current_layer = -1

    def op(self, inputs, ms: float, out_mb: float, *, weight_mb: float = 0.0, weights: int = 1) -> int:
        """A compute node reading ``inputs`` (plus ``weights`` weight nodes at operator granularity
        when ``weight_mb`` > 0 and ``weights`` > 0; with ``weights`` == 0 the weight bytes stay on the
        node itself, as in layer graphs)."""
        w_ids = []
        if weight_mb > 0 and weights > 0:
            for _ in range(weights):
                w_ids.append(self._node(0.0, 0.0, weight_mb / weights, weight_mb / weights))
        jitter = float(self.rng.lognormal(0.0, 0.15))
        v = self._node(ms * 1e-3 * jitter, out_mb, out_mb + (weight_mb if weights == 0 else 0.0), None)
        cls = v
        for w in w_ids:
            self.coloc[w] = cls
        self.coloc[v] = cls if w_ids else -1
        self.edges += [(int(i), v) for i in dict.fromkeys(inputs)] + [(w, v) for w in w_ids]
        return v

    def _node(self, t_acc: float, out_mb: float, size_mb: float, out_override) -> int:
        i = len(self.acc)
        self.acc.append(t_acc)
        self.cpu.append(t_acc * self.cpu_factor * float(self.rng.lognormal(0.0, 0.1)))
        self.out.append(out_mb)
        self.size.append(size_mb)
        self.layer.append(self.current_layer)
        self.coloc.append(-1)
        return i

    def graph(self) -> OpGraph:
        out_bytes = np.asarray(self.out) * MB
        g = profiled_graph(sorted(set(self.edges)), self.cpu, self.acc, out_bytes / HOST_LINK,
                           size=np.asarray(self.size) * MB, colocation=self.coloc, name=self.name)
        # profiled_graph keeps no layer ids; rebuild with them (OpGraph is immutable)
        from dataclasses import replace

        return replace(g, layer=np.asarray(self.layer), meta={"generator": "planmap.workloads.nets"})


# ------------------------------------------------------------------------------------ networks
def bert(layers: int = 12, *, granularity: str = "operator", seq: int = 384, hidden: int = 768, batch: int = 8,
         seed: int = 0) -> OpGraph:
    """BERT encoder: embeddings, ``layers`` x (self-attention, feed-forward), pooler.

    Operator granularity has about 65 nodes per layer (BERT-12: ~800), layer granularity 3."""
    net = _Net(f"bert{layers}-{granularity[:2]}", seed, cpu_factor=23.0)
    act = batch * seq * hidden * 4 / MB  # one activation (MB)
    att = batch * 12 * seq * seq * 4 / MB  # attention scores
    wq = hidden * hidden * 4 / MB
    op = granularity == "operator"
    x = net.op([], 1.0, act, weight_mb=90.0 if op else 0, weights=1 if op else 0)  # embeddings
    x = net.op([x], 1.2, act, weight_mb=0.01, weights=1 if op else 0)  # layer norm
    for layer in range(layers):
        net.current_layer = layer
        if not op:
            a = net.op([x], 38.0, act, weight_mb=4 * wq, weights=0)
            f = net.op([a], 9.5, act * 4, weight_mb=8 * wq, weights=0)
            x = net.op([f, a], 3.0, act, weight_mb=0.02, weights=0)
            continue
        heads = []
        for _ in range(3):  # q, k, v projections
            h = net.op([x], 0.51, act, weight_mb=wq, weights=2)
            h = net.op([h], 0.29, act, weight_mb=0.003)
            h = net.op([h], 0.15, act)
            h = net.op([h], 0.15, act)
            heads.append(net.op([h], 0.29, act))
        s = net.op(heads[:2], 3.35, att)
        s = net.op([s], 3.53, att)
        s = net.op([s], 2.35, att, weight_mb=0.001)
        s = net.op([s], 3.53, att)
        d = net.op([s], 2.39, att * 0.25)
        for _ in range(2):  # dropout masks (free ops, tiny outputs)
            net.op([d], 0.0, 1e-7)
        c = net.op([d, heads[2]], 17.5, act)
        c = net.op([c], 0.29, act)
        c = net.op([c], 0.15, act)
        c = net.op([c], 0.15, act)
        c = net.op([c], 0.51, act, weight_mb=wq, weights=2)
        c = net.op([c], 0.29, act, weight_mb=0.003)
        c = net.op([c], 0.30, act * 0.03)
        a = net.op([c, x], 0.29, act)
        ln = net.op([a], 1.18, 1e-7, weight_mb=0.006)
        for _ in range(3):
            net.op([ln], 0.0, 1e-7)
        f = net.op([ln, a], 2.71, act * 4, weight_mb=4 * wq, weights=2)
        f = net.op([f], 1.57, act * 4, weight_mb=0.012)
        f = net.op([f], 2.35, act * 4)
        f = net.op([f], 2.08, act, weight_mb=4 * wq, weights=2)
        f = net.op([f], 0.29, act, weight_mb=0.003)
        f = net.op([f], 0.30, act * 0.03)
        x = net.op([f, a], 0.29, act)
        for _ in range(2):
            x = net.op([x], 0.6, act, weight_mb=0.003)
    net.current_layer = layers
    p = net.op([x], 0.5, act / seq, weight_mb=wq)
    net.op([p], 0.1, 0.01, weight_mb=0.01)
    return net.graph()


def resnet50(*, granularity: str = "operator", image: int = 224, batch: int = 32, seed: int = 0) -> OpGraph:
    """ResNet-50: stem, 16 bottleneck blocks (3, 4, 6, 3), pooling and classifier.

    Operator granularity (conv, batch-norm, relu, add as separate ops with their weights): ~600
    nodes; layer granularity (conv+bn+relu fused): ~75."""
    op = granularity == "operator"
    net = _Net(f"resnet50-{granularity[:2]}", seed, cpu_factor=10.0)

    def conv(x, cin, cout, k, hw, relu=True):
        out = batch * cout * hw * hw * 4 / MB
        flops_ms = 2 * batch * cin * cout * k * k * hw * hw / 14e12 * 1e3 + 0.05
        w = cin * cout * k * k * 4 / MB
        if not op:
            return net.op([x], flops_ms * 1.3, out, weight_mb=w, weights=0)
        y = net.op([x], flops_ms, out, weight_mb=w, weights=2)
        y = net.op([y], out / 900 + 0.02, out, weight_mb=cout * 16 / MB, weights=4)
        return net.op([y], out / 1200 + 0.01, out) if relu else y

    hw = image // 2
    x = conv(net.op([], 0.1, batch * 3 * image * image * 4 / MB), 3, 64, 7, hw)
    hw //= 2
    x = net.op([x], 0.3, batch * 64 * hw * hw * 4 / MB)
    cin = 64
    for stage, (blocks, width) in enumerate(((3, 64), (4, 128), (6, 256), (3, 512))):
        for b in range(blocks):
            net.current_layer = stage * 10 + b
            if b == 0 and stage > 0:
                hw //= 2
            y = conv(x, cin, width, 1, hw)
            y = conv(y, width, width, 3, hw)
            y = conv(y, width, 4 * width, 1, hw, relu=False)
            short = conv(x, cin, 4 * width, 1, hw, relu=False) if b == 0 else x
            out = batch * 4 * width * hw * hw * 4 / MB
            x = net.op([y, short], out / 1000 + 0.01, out)
            if op:
                x = net.op([x], out / 1200 + 0.01, out)
            cin = 4 * width
    net.current_layer = 40
    x = net.op([x], 0.2, batch * cin * 4 / MB)
    net.op([x], 0.3, batch * 1000 * 4 / MB, weight_mb=cin * 1000 * 4 / MB, weights=1 if op else 0)
    return net.graph()


def gnmt(*, steps: int = 8, encoder_layers: int = 4, decoder_layers: int = 4, batch: int = 64,
         seed: int = 0) -> OpGraph:
    """GNMT-style translation model unrolled over ``steps``: a grid of LSTM cells (encoder, the first
    layer bidirectional) and a decoder whose every step attends over all encoder outputs (~100
    nodes at the defaults, a layer graph)."""
    net = _Net(f"gnmt{steps}", seed, cpu_factor=8.0)
    hid = batch * 1024 * 4 / MB
    cell_w = 8 * 1024 * 1024 * 4 / MB
    emb = net.op([], 0.5, hid * steps, weight_mb=128.0, weights=0)
    fwd: list[int] = []
    bwd: list[int] = []
    for t in range(steps):
        fwd.append(net.op([emb] + fwd[-1:], 0.9, hid, weight_mb=cell_w if t == 0 else 0, weights=0))
    for t in range(steps):
        bwd.append(net.op([emb] + bwd[-1:], 0.9, hid, weight_mb=cell_w if t == 0 else 0, weights=0))
    below = [net.op([fwd[t], bwd[steps - 1 - t]], 0.05, 2 * hid) for t in range(steps)]
    for layer in range(1, encoder_layers):
        net.current_layer = layer
        row: list[int] = []
        for t in range(steps):
            row.append(net.op([below[t]] + row[-1:], 0.9, hid, weight_mb=cell_w if t == 0 else 0, weights=0))
        below = row
    memory = net.op(below, 0.3, hid * steps)
    prev = net.op([], 0.3, hid, weight_mb=128.0, weights=0)
    for t in range(steps):
        net.current_layer = encoder_layers + t
        a = net.op([memory, prev], 0.6, hid, weight_mb=1024 * 1024 * 4 / MB if t == 0 else 0, weights=0)
        h = a
        for layer in range(decoder_layers):
            h = net.op([h, a], 0.9, hid, weight_mb=cell_w if t == 0 and layer else 0, weights=0)
        prev = net.op([h], 1.2, batch * 32000 * 4 / MB / 8, weight_mb=125.0 if t == 0 else 0, weights=0)
    return net.graph()


def inception_v3(*, batch: int = 32, seed: int = 0) -> OpGraph:
    """Inception-v3 as a layer graph (conv, batch-norm and relu layers, pools, concatenations):
    ~330 nodes, with the network's 4-branch modules (A x3, B, C x4, D, E x2)."""
    net = _Net("inception_v3", seed, cpu_factor=10.0)

    def conv(x, cin, cout, kh, kw, hw):
        out = batch * cout * hw * hw * 4 / MB
        ms = 2 * batch * cin * cout * kh * kw * hw * hw / 14e12 * 1e3 + 0.1
        y = net.op([x], ms, out, weight_mb=cin * cout * kh * kw * 4 / MB, weights=0)
        y = net.op([y], out / 900 + 0.05, out, weight_mb=cout * 16 / MB, weights=0)
        return net.op([y], out / 1200 + 0.03, out)

    def branch(x, cin, spec, hw):
        for cout, kh, kw in spec:
            x = conv(x, cin, cout, kh, kw, hw)
            cin = cout
        return x, cin

    def module(x, cin, branches, hw, pool=True):
        outs, total = [], 0
        for spec in branches:
            y, c = branch(x, cin, spec, hw)
            outs.append(y)
            total += c
        if pool:
            p = net.op([x], batch * cin * hw * hw * 4 / MB / 1500 + 0.05, batch * cin * hw * hw * 4 / MB)
            y, c = branch(p, cin, [(max(32, cin // 4), 1, 1)], hw)
            outs.append(y)
            total += c
        return net.op(outs, 0.05, batch * total * hw * hw * 4 / MB), total

    x = net.op([], 0.1, batch * 3 * 299 * 299 * 4 / MB)
    hw = 149
    for cin, cout in ((3, 32), (32, 32), (32, 64)):
        x = conv(x, cin, cout, 3, 3, hw)
    hw = 73
    x = net.op([x], 0.3, batch * 64 * hw * hw * 4 / MB)
    x = conv(x, 64, 80, 1, 1, hw)
    x = conv(x, 80, 192, 3, 3, 71)
    hw = 35
    x = net.op([x], 0.3, batch * 192 * hw * hw * 4 / MB)
    cin = 192
    for i in range(3):
        net.current_layer = i
        x, cin = module(x, cin, [[(64, 1, 1)], [(48, 1, 1), (64, 5, 5)], [(64, 1, 1), (96, 3, 3), (96, 3, 3)]], hw)
    net.current_layer = 3
    x, cin = module(x, cin, [[(384, 3, 3)], [(64, 1, 1), (96, 3, 3), (96, 3, 3)]], 17, pool=False)
    hw = 17
    for i, c7 in enumerate((128, 160, 160, 192)):
        net.current_layer = 4 + i
        x, cin = module(x, cin, [[(192, 1, 1)], [(c7, 1, 1), (c7, 1, 7), (192, 7, 1)],
                                 [(c7, 1, 1), (c7, 7, 1), (c7, 1, 7), (c7, 7, 1), (192, 1, 7)]], hw)
    aux = net.op([x], 0.1, batch * cin * 25 * 4 / MB)  # auxiliary classifier (inference keeps it)
    aux = conv(aux, cin, 128, 1, 1, 5)
    aux = conv(aux, 128, 768, 5, 5, 1)
    net.op([aux], 0.1, batch * 1000 * 4 / MB, weight_mb=768 * 1000 * 4 / MB, weights=0)
    net.current_layer = 8
    x, cin = module(x, cin, [[(192, 1, 1), (320, 3, 3)], [(192, 1, 1), (192, 1, 7), (192, 7, 1), (192, 3, 3)]], 8,
                    pool=False)
    hw = 8
    for i in range(2):
        net.current_layer = 9 + i
        x, cin = _inception_e(net, conv, x, cin, hw, batch)
    net.current_layer = 11
    x = net.op([x], 0.2, batch * cin * 4 / MB)
    net.op([x], 0.3, batch * 1000 * 4 / MB, weight_mb=cin * 1000 * 4 / MB, weights=0)
    return net.graph()


def _inception_e(net: _Net, conv, x: int, cin: int, hw: int, batch: int) -> tuple[int, int]:
    """Inception-v3's last module type: two of its branches split into parallel 1x3 and 3x1 convs."""
    outs = [conv(x, cin, 320, 1, 1, hw)]
    for stem in ([(384, 1, 1)], [(448, 1, 1), (384, 3, 3)]):
        y, c = x, cin
        for cout, kh, kw in stem:
            y = conv(y, c, cout, kh, kw, hw)
            c = cout
        a, b = conv(y, c, 384, 1, 3, hw), conv(y, c, 384, 3, 1, hw)
        outs.append(net.op([a, b], 0.03, batch * 768 * hw * hw * 4 / MB))
    p = net.op([x], 0.1, batch * cin * hw * hw * 4 / MB)
    outs.append(conv(p, cin, 192, 1, 1, hw))
    total = 320 + 768 + 768 + 192
    return net.op(outs, 0.05, batch * total * hw * hw * 4 / MB), total


NETWORKS = {
    "bert": bert,
    "resnet50": resnet50,
    "gnmt": gnmt,
    "inception_v3": inception_v3,
}


def net_topology(graph: OpGraph, accelerators: int, *, fill: float = 0.6, cpus: int = 1):
    """The paper's cluster (1 CPU + ``accelerators`` through host memory) with per-accelerator
    memory such that the model's state fills ``fill`` of the accelerators' memory in total, rounded
    up to a whole MiB and never below the largest colocation group (so a placement exists)."""
    state = graph.state_bytes.astype(float)
    total = float(state.sum())
    cls = graph.colocation
    largest = float(state.max()) if len(state) else 0.0
    if (cls >= 0).any():
        sums = np.bincount(cls[cls >= 0], weights=state[cls >= 0])
        largest = max(largest, float(sums.max()))
    memory = max(total / (fill * accelerators), largest * 1.05)
    return paper_topology(accelerators, cpus, memory=int(math.ceil(memory / MB)) * MB)
