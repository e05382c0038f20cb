"""Synthetic pipeline workloads shaped like the inputs of Tarnawski et al.'s throughput experiments.

The paper's profiled graphs (``throughput-inputs/`` of msr-fiddle/dnn-partitioning) cannot be
shipped, so the throughput solvers are tested and benchmarked on generated graphs with the same
*structure*, which is what decides how hard they are:

* BERT at operator granularity — attention with three parallel Q/K/V branches, decomposed
  LayerNorm/GELU diamonds, an attention mask consumed by every layer, and weight-cast nodes
  colocated with the op that uses them (the paper's colour classes), so the number of ideals stays
  in the thousands;
* ResNet-50 and GNMT at layer granularity — long chains with short skip branches, bidirectional
  first encoder layer, attention context consumed by every decoder layer;
* Inception-v3 at layer granularity (conv, batch-norm, ReLU as separate layers, ~320 forward nodes)
  — wide blocks of 3-4 branches whose product of branch lengths gives tens of thousands of ideals.

Calibration (from the paper's inputs): accelerator time per layer lognormal around 0.1-1 ms, CPU
about 10x slower, backward about 2x forward, a node's output transfer 5-30 % of a node's time,
node outputs read by their backward twin (the stash). Times are written in seconds.

Training graphs mirror the forward graph like the paper's: node ``i`` has the backward twin
``2n-1-i`` in its colocation class; the twin of ``v`` receives the gradient from the twins of
``v``'s successors and reads the forward outputs of ``v`` and of ``v``'s inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planmap.graph import Arg, OpGraph, TensorType

__all__ = ["Layers", "pipeline_graph", "transformer_ops", "resnet_layers", "gnmt_layers", "inception_layers",
           "WORKLOADS", "workload", "tight_memory"]


@dataclass
class Layers:
    """A forward DAG under construction: per node a relative cost, parameter bytes, output bytes."""

    names: list[str]
    preds: list[list[int]]
    work: list[float]
    params: list[float]
    out: list[float]
    group: list[int]  # nodes with the same group id >= 0 are colocated (a weight cast and its op)
    layer: list[int]

    @classmethod
    def empty(cls) -> Layers:
        return cls([], [], [], [], [], [], [])

    def add(self, name: str, preds: Sequence[int] = (), work: float = 1.0, params: float = 0.0, out: float = 1.0,
            group: int = -1, layer: int = -1) -> int:
        self.names.append(name)
        self.preds.append(sorted(set(int(p) for p in preds)))
        self.work.append(work)
        self.params.append(params)
        self.out.append(out)
        self.group.append(group)
        self.layer.append(layer)
        return len(self.names) - 1

    def chain(self, name: str, start: int | Sequence[int], specs: Sequence[tuple[str, float, float, float]],
              layer: int = -1) -> int:
        """Append ops one after another; ``specs`` = (suffix, work, param bytes, out bytes)."""
        prev = [start] if isinstance(start, int) else list(start)
        last = prev[0]
        for suffix, work, params, out in specs:
            last = self.add(f"{name}/{suffix}", prev, work, params, out, layer=layer)
            prev = [last]
        return last

    @property
    def n(self) -> int:
        return len(self.names)


def pipeline_graph(layers: Layers, *, name: str, seed: int = 0, training: bool = False, time_scale: float = 3e-4,
                   cpu_ratio: float = 10.0, bwd_ratio: float = 2.0, comm_ratio: float = 0.12,
                   act_scale: float = 4e6, param_scale: float = 1.0) -> OpGraph:
    """A profiled OpGraph from a forward DAG: lognormal noise on the relative costs, parameters as
    ``param`` arguments (used by the op and its backward twin), and, with ``training``, mirrored twins."""
    rng = np.random.default_rng(seed)
    n = layers.n
    work = np.asarray(layers.work, float) * rng.lognormal(0.0, 0.35, n)
    acc = work * time_scale
    cpu = acc * cpu_ratio * rng.lognormal(0.0, 0.15, n)
    rel_out = np.asarray(layers.out, float)  # 0: a node without outputs
    out = np.where(rel_out > 0, np.maximum(1, rel_out * act_scale * rng.lognormal(0.0, 0.2, n)), 0).astype(np.int64)
    comm = out / out.mean() * comm_ratio * acc.mean()
    pbytes = (np.asarray(layers.params, float) * param_scale).astype(np.int64)
    fwd_src = [p for v in range(n) for p in layers.preds[v]]
    fwd_dst = [v for v in range(n) for _ in layers.preds[v]]
    group = np.asarray(layers.group)
    cls = np.arange(n)
    for g in np.unique(group[group >= 0]):
        members = np.flatnonzero(group == g)
        cls[members] = members.min()
    layer_ids = np.asarray(layers.layer)
    if not training:
        return _build(name, n, fwd_src, fwd_dst, acc, cpu, comm, out, pbytes, cls, np.zeros(n, bool), layer_ids)
    N = 2 * n
    twin = N - 1 - np.arange(n)
    src, dst = list(fwd_src), list(fwd_dst)
    for u, v in zip(fwd_src, fwd_dst, strict=True):
        src += [int(twin[v]), u]  # gradient flows back; v's backward reads its input u
        dst += [int(twin[u]), int(twin[v])]
    src += list(range(n))  # each backward node reads its forward output (stash)
    dst += [int(t) for t in twin]
    mirror = lambda a, r: np.concatenate([a, (a * r)[::-1]])  # noqa: E731 - backward ~ r x forward
    bwd_noise = rng.lognormal(0.0, 0.25, n)
    acc_t = np.concatenate([acc, (acc * bwd_ratio * bwd_noise)[::-1]])
    cpu_t = np.concatenate([cpu, (cpu * bwd_ratio * bwd_noise)[::-1]])
    return _build(name + "-train", N, src, dst, acc_t, cpu_t, mirror(comm, 1.0), mirror(out, 1).astype(np.int64),
                  np.concatenate([pbytes, np.zeros(n, np.int64)]), np.concatenate([cls, cls[::-1]]),
                  np.concatenate([np.zeros(n, bool), np.ones(n, bool)]), np.concatenate([layer_ids, layer_ids[::-1]]),
                  param_users=lambda i: [i, int(twin[i])])


def _build(name, n, src, dst, acc, cpu, comm, out, pbytes, cls, backward, layer_ids, param_users=None) -> OpGraph:
    """Values: node i produces value i; parameter j (for each node with parameters) is value n + j."""
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    pairs = np.unique(np.stack([src, dst], 1), axis=0) if len(src) else np.zeros((0, 2), np.int64)
    holders = np.flatnonzero(pbytes[: len(pbytes)] > 0)
    args, edge_v, edge_d = [], list(pairs[:, 0]), list(pairs[:, 1])
    value_node = list(range(n))
    value_index = [0] * n
    value_bytes = list(out)
    value_time = list(comm)
    for j, i in enumerate(holders.tolist()):
        vid = n + j
        args.append(Arg(j, f"{name}/param{i}", TensorType((int(pbytes[i]) // 4,), "f32"), "param", vid))
        value_node.append(-1)
        value_index.append(j)
        value_bytes.append(int(pbytes[i]))
        value_time.append(np.nan)
        for user in (param_users(i) if param_users else [i]):
            edge_v.append(vid)
            edge_d.append(user)
    order = np.lexsort((edge_v, edge_d))
    return OpGraph(
        name=name, kind=("op",) * n, op_name=tuple(f"{name}/n{i}" for i in range(n)), flops=np.zeros(n),
        bytes_accessed=np.zeros(n), out_bytes=out, state_bytes=np.zeros(n, np.int64), dtype=("f32",) * n,
        value_node=np.asarray(value_node), value_index=np.asarray(value_index), value_bytes=np.asarray(value_bytes),
        value_time=np.asarray(value_time, float), edge_value=np.asarray(edge_v)[order],
        edge_dst=np.asarray(edge_d)[order],
        args=tuple(args), measured={"cpu": np.asarray(cpu, float), "accelerator": np.asarray(acc, float)},
        colocation=np.asarray(cls), backward=np.asarray(backward, bool), layer=np.asarray(layer_ids),
        results=np.asarray([n - 1]),
    )


# ------------------------------------------------------------------------------------ structures
def transformer_ops(layers: int = 12, hidden_params: float = 4e6) -> Layers:
    """BERT at operator granularity (ONNX-like): ~70 forward ops per layer."""
    g = Layers.empty()
    w = hidden_params
    ids = g.add("input_ids", [], 0.05, out=0.01)
    mask_in = g.add("mask", [], 0.05, out=0.01)
    mask = g.chain("mask", mask_in, [("cast", 0.05, 0, 0.02), ("sub", 0.05, 0, 0.02), ("mul", 0.05, 0, 0.02)])
    we = g.add("emb/word", [ids], 0.6, params=8 * w, out=1.0)
    pe = g.add("emb/pos", [ids], 0.3, params=0.5 * w, out=1.0)
    x = g.add("emb/add", [we, pe], 0.4)
    x = _layernorm(g, "emb/ln", x, -1)
    for li in range(layers):
        x = _transformer_layer(g, f"layer{li}", x, mask, w, li)
    pool = g.chain("head", x, [("slice", 0.05, 0, 0.1), ("dense", 0.3, w / 4, 0.1), ("tanh", 0.05, 0, 0.1),
                               ("cls", 0.2, w / 8, 0.01), ("loss", 0.05, 0, 0.001)])
    del pool
    return g


def _weighted(g: Layers, name: str, inputs, work: float, params: float, layer: int, out: float = 1.0) -> int:
    """An op with a weight: a cast node of the weight, colocated with the op (paper's colour class)."""
    grp = g.n
    cast = g.add(f"{name}/weight_cast", [], 0.02, out=params / 4e6 + 1e-3, group=grp, layer=layer)
    return g.add(name, [*inputs, cast], work, params=params, out=out, group=grp, layer=layer)


def _layernorm(g: Layers, name: str, x: int, layer: int) -> int:
    mean = g.add(f"{name}/mean", [x], 0.1, out=0.01, layer=layer)
    sub = g.add(f"{name}/sub", [x, mean], 0.15, layer=layer)
    pw = g.add(f"{name}/pow", [sub], 0.15, layer=layer)
    var = g.add(f"{name}/var", [pw], 0.1, out=0.01, layer=layer)
    eps = g.add(f"{name}/add_eps", [var], 0.05, out=0.01, layer=layer)
    sq = g.add(f"{name}/sqrt", [eps], 0.05, out=0.01, layer=layer)
    div = g.add(f"{name}/div", [sub, sq], 0.15, layer=layer)
    mul = _weighted(g, f"{name}/mul", [div], 0.1, 2e3, layer)
    return _weighted(g, f"{name}/add", [mul], 0.1, 2e3, layer)


def _transformer_layer(g: Layers, name: str, x: int, mask: int, w: float, li: int) -> int:
    heads = []
    for proj in ("q", "k", "v"):
        mm = _weighted(g, f"{name}/{proj}/matmul", [x], 1.0, w, li)
        b = _weighted(g, f"{name}/{proj}/bias", [mm], 0.15, 4e3, li)
        heads.append(g.chain(f"{name}/{proj}", b, [("reshape", 0.05, 0, 1.0), ("transpose", 0.15, 0, 1.0)], li))
    q, k, v = heads
    s = g.add(f"{name}/scores", [q, k], 0.8, out=1.5, layer=li)
    s = g.add(f"{name}/scale", [s], 0.1, out=1.5, layer=li)
    s = g.add(f"{name}/mask_add", [s, mask], 0.1, out=1.5, layer=li)
    s = g.chain(f"{name}/softmax", s, [("max", 0.1, 0, 0.05), ("sub", 0.1, 0, 1.5), ("exp", 0.15, 0, 1.5),
                                       ("sum", 0.1, 0, 0.05), ("div", 0.1, 0, 1.5), ("dropout", 0.1, 0, 1.5)], li)
    c = g.add(f"{name}/context", [s, v], 0.8, layer=li)
    c = g.chain(f"{name}/ctx", c, [("transpose", 0.15, 0, 1.0), ("reshape", 0.05, 0, 1.0)], li)
    o = _weighted(g, f"{name}/out/matmul", [c], 1.0, w, li)
    o = _weighted(g, f"{name}/out/bias", [o], 0.15, 4e3, li)
    o = g.add(f"{name}/out/dropout", [o], 0.1, layer=li)
    r = g.add(f"{name}/residual1", [o, x], 0.15, layer=li)
    h = _layernorm(g, f"{name}/ln1", r, li)
    f = _weighted(g, f"{name}/ffn1/matmul", [h], 4.0, 4 * w, li, out=4.0)
    f = _weighted(g, f"{name}/ffn1/bias", [f], 0.4, 1.6e4, li, out=4.0)
    half = g.add(f"{name}/gelu/div", [f], 0.2, out=4.0, layer=li)
    erf = g.add(f"{name}/gelu/erf", [half], 0.3, out=4.0, layer=li)
    one = g.add(f"{name}/gelu/add", [erf], 0.2, out=4.0, layer=li)
    gm = g.add(f"{name}/gelu/mul", [f, one], 0.2, out=4.0, layer=li)
    gm = g.add(f"{name}/gelu/half", [gm], 0.2, out=4.0, layer=li)
    f = _weighted(g, f"{name}/ffn2/matmul", [gm], 4.0, 4 * w, li)
    f = _weighted(g, f"{name}/ffn2/bias", [f], 0.15, 4e3, li)
    f = g.add(f"{name}/ffn/dropout", [f], 0.1, layer=li)
    r = g.add(f"{name}/residual2", [f, h], 0.15, layer=li)
    return _layernorm(g, f"{name}/ln2", r, li)


def resnet_layers(blocks: Sequence[int] = (3, 4, 6, 3)) -> Layers:
    """ResNet-50 at layer granularity: conv, batch-norm and ReLU layers, bottleneck blocks."""
    g = Layers.empty()
    x = g.chain("stem", g.add("input", [], 0.05, out=1.0),
                [("conv", 2.0, 4e4, 3.0), ("bn", 0.3, 500, 3.0), ("relu", 0.2, 0, 3.0), ("pool", 0.3, 0, 1.0)])
    li = 0
    for stage, count in enumerate(blocks):
        width = 64 * 2 ** stage
        for b in range(count):
            name = f"s{stage}b{b}"
            p = 4.0 * width * width
            main = g.chain(name, x, [("conv1", 1.0, p / 4, 1.0), ("bn1", 0.2, width, 1.0), ("relu1", 0.1, 0, 1.0),
                                     ("conv2", 1.5, 9 * p / 16, 1.0), ("bn2", 0.2, width, 1.0),
                                     ("relu2", 0.1, 0, 1.0), ("conv3", 1.0, p, 2.0), ("bn3", 0.3, 4 * width, 2.0)],
                           li)
            short = x
            if b == 0:
                short = g.chain(name, x, [("proj", 1.0, p, 2.0), ("proj_bn", 0.3, 4 * width, 2.0)], li)
            x = g.chain(name, [main, short], [("add", 0.2, 0, 2.0), ("relu", 0.1, 0, 2.0)], li)
            li += 1
    g.chain("head", x, [("pool", 0.1, 0, 0.01), ("fc", 0.2, 8e6, 0.01), ("loss", 0.02, 0, 0.001)])
    return g


def gnmt_layers(encoder: int = 8, decoder: int = 8, sinks: int = 0) -> Layers:
    """GNMT at layer granularity: bidirectional first encoder layer, residual stacks, attention context
    read by every decoder layer, a decoder embedding independent of the encoder. ``sinks`` zero-cost
    nodes without outputs hang off one node each, spread over the graph (as in Tarnawski et al.'s GNMT
    graphs, where they multiply the ideals unless merged into their neighbour)."""
    g = _gnmt(encoder, decoder)
    hosts: Any = np.linspace(1, g.n - 2, sinks).round().astype(int) if sinks else []
    for k, h in enumerate(hosts):
        g.add(f"{g.names[h]}/sink{k}", [int(h)], 0.0, out=0.0, layer=g.layer[h])
    return g


def _gnmt(encoder: int, decoder: int) -> Layers:
    g = Layers.empty()
    p = 3.2e7
    src = g.add("enc/embedding", [g.add("src_tokens", [], 0.02, out=0.02)], 0.3, params=1.3e8)
    fwd = g.add("enc/l0_fwd", [src], 2.0, params=p)
    bwd = g.add("enc/l0_bwd", [src], 2.0, params=p)
    x = g.add("enc/l1", [g.add("enc/concat", [fwd, bwd], 0.1, out=2.0)], 2.0, params=p)
    for i in range(2, encoder):
        h = g.add(f"enc/l{i}", [x], 2.0, params=p, layer=i)
        x = g.add(f"enc/res{i}", [h, x], 0.1, layer=i) if i >= 2 else h
    tgt = g.add("dec/embedding", [g.add("tgt_tokens", [], 0.02, out=0.02)], 0.3, params=1.3e8)
    y = g.add("dec/l0", [tgt], 2.0, params=p)
    att = g.chain("dec/attention", [y, x], [("score", 0.8, p / 8, 1.0), ("softmax", 0.2, 0, 0.2),
                                            ("context", 0.6, 0, 1.0)])
    for i in range(1, decoder):
        h = g.add(f"dec/l{i}", [y, att], 2.0, params=p, layer=100 + i)
        y = g.add(f"dec/res{i}", [h, y], 0.1, layer=100 + i) if i >= 2 else h
    g.chain("dec", [y, att], [("classifier", 3.0, 1.3e8, 4.0), ("softmax", 0.5, 0, 4.0), ("loss", 0.05, 0, 0.01)])
    return g


def _conv(g: Layers, name: str, x: int | Sequence[int], work: float, params: float, out: float, layer: int) -> int:
    return g.chain(name, x, [("conv", work, params, out), ("bn", 0.15 * work, params / 100, out),
                             ("relu", 0.08 * work, 0, out)], layer)


def _branches(g: Layers, name: str, x: int, branches: Sequence[Sequence[float]], layer: int,
              pool_first: Sequence[bool] = ()) -> list[int]:
    ends = []
    for bi, convs in enumerate(branches):
        cur = x
        if bi < len(pool_first) and pool_first[bi]:
            cur = g.add(f"{name}/b{bi}/pool", [cur], 0.2, layer=layer)
        for ci, work in enumerate(convs):
            cur = _conv(g, f"{name}/b{bi}/c{ci}", cur, work, 2e5 * work, 1.0, layer)
        ends.append(cur)
    return ends


def inception_layers(a_blocks: int = 3, c_blocks: int = 4, e_blocks: int = 2) -> Layers:
    """Inception-v3 at layer granularity (~320 forward nodes, tens of thousands of ideals)."""
    g = Layers.empty()
    x = g.add("input", [], 0.02, out=1.0)
    for i, work in enumerate([0.6, 1.2, 1.6]):
        x = _conv(g, f"stem/c{i}", x, work, 1e4 * (i + 1), 3.0, -1)
    x = g.add("stem/pool1", [x], 0.3, out=1.5)
    for i, work in enumerate([0.5, 2.0]):
        x = _conv(g, f"stem/c{3 + i}", x, work, 4e4 * (i + 1), 1.5, -1)
    x = g.add("stem/pool2", [x], 0.3, out=1.0)
    li = 0
    for b in range(a_blocks):
        ends = _branches(g, f"A{b}", x, [[0.5], [0.4, 1.2], [0.5, 1.0, 1.4], [0.4]], li, (False, False, False, True))
        x = g.add(f"A{b}/concat", ends, 0.1, out=1.0, layer=li)
        li += 1
    ends = _branches(g, "B", x, [[2.0], [0.5, 1.0, 0.6], []], li, (False, False, True))
    x = g.add("B/concat", ends, 0.1, out=0.8, layer=li)
    li += 1
    for b in range(c_blocks):
        ends = _branches(g, f"C{b}", x, [[0.6], [0.4, 0.5, 0.6], [0.4, 0.5, 0.5, 0.5, 0.6], [0.6]], li,
                         (False, False, False, True))
        x = g.add(f"C{b}/concat", ends, 0.1, out=0.8, layer=li)
        li += 1
    ends = _branches(g, "D", x, [[0.6, 0.8], [0.6, 0.6, 0.6, 0.5], []], li, (False, False, True))
    x = g.add("D/concat", ends, 0.1, out=0.5, layer=li)
    li += 1
    for b in range(e_blocks):
        name = f"E{b}"
        b0 = _conv(g, f"{name}/b0", x, 0.6, 1.2e5, 0.4, li)
        s1 = _conv(g, f"{name}/b1/c0", x, 0.7, 1.4e5, 0.4, li)
        b1 = [_conv(g, f"{name}/b1/{k}", s1, 0.5, 1e5, 0.4, li) for k in ("1x3", "3x1")]
        s2 = _conv(g, f"{name}/b2/c1", _conv(g, f"{name}/b2/c0", x, 0.8, 1.6e5, 0.4, li), 1.4, 2.8e5, 0.4, li)
        b2 = [_conv(g, f"{name}/b2/{k}", s2, 0.5, 1e5, 0.4, li) for k in ("1x3", "3x1")]
        b3 = _conv(g, f"{name}/b3", g.add(f"{name}/b3/pool", [x], 0.2, layer=li), 0.4, 8e4, 0.4, li)
        x = g.add(f"{name}/concat", [b0, *b1, *b2, b3], 0.1, out=0.4, layer=li)
        li += 1
    g.chain("head", x, [("pool", 0.1, 0, 0.02), ("fc", 0.3, 8e6, 0.01), ("loss", 0.02, 0, 0.001)])
    return g


# --------------------------------------------------------------------------------------- registry
WORKLOADS = {  # totals: BERT-12 ~0.6 GB of parameters, ResNet-50 ~0.1 GB, GNMT ~0.7 GB, Inception-v3 ~0.1 GB
    "bert12-ops": lambda: (transformer_ops(12), dict(time_scale=2e-4, act_scale=1e6)),
    "bert3-ops": lambda: (transformer_ops(3), dict(time_scale=2e-4, act_scale=1e6)),
    "resnet50-layers": lambda: (resnet_layers(), dict(time_scale=3e-4, act_scale=1e6, param_scale=5.0)),
    "gnmt-layers": lambda: (gnmt_layers(), dict(time_scale=8e-4, act_scale=2e6)),
    "gnmt-sinks-layers": lambda: (gnmt_layers(sinks=17), dict(time_scale=8e-4, act_scale=2e6)),
    "inception-layers": lambda: (inception_layers(), dict(time_scale=4e-4, act_scale=1e6, param_scale=5.0)),
}


def workload(name: str, *, training: bool = False, seed: int = 0) -> OpGraph:
    """One of :data:`WORKLOADS` as a profiled OpGraph (inference, or training with backward twins)."""
    if name not in WORKLOADS:
        raise KeyError(f"unknown workload {name!r}; available: {', '.join(WORKLOADS)}")
    layers, kw = WORKLOADS[name]()
    return pipeline_graph(layers, name=name, seed=seed, training=training, **kw)


def tight_memory(graph: OpGraph, devices: int, *, mode: str = "inference", schedule: str = "1f1b",
                 microbatches: int = 4, optimizer: str = "adam", slack: float = 1.3) -> float:
    """Per-device memory that makes ``devices`` accelerators *just* hold the model: ``slack`` times an
    even share of parameters (x the training factor) and stashed activations (x the microbatches in
    flight on an average stage), plus the largest working set of any node."""
    from planmap.cost import CostModel, param_memory_factor
    from planmap.workloads.graphs import paper_topology

    cost = CostModel.build(graph, paper_topology(1), mode=mode, optimizer=optimizer)
    params = float(graph.value_bytes[graph.param_values].sum()) * param_memory_factor(mode, optimizer)
    in_flight = 1.0
    if mode == "training":
        in_flight = microbatches if schedule == "gpipe" else (min(microbatches, devices) + 1) / 2
    stash = float(cost.stash_bytes.sum()) * in_flight
    return slack * (params + float(graph.state_bytes.sum()) + stash) / devices + float(cost.working_set.max())
