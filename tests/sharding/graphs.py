"""Hand-built graphs with DimMaps for the sharding tests: a 2-layer MLP (x[B,D] @ W1[D,H] -> relu -> @ W2[H,D]),
forward or a training step (upstream gradient ``dy`` given as data), and clusters from specs/clusters."""

from __future__ import annotations

from pathlib import Path

from planmap.cluster import Topology
from planmap.graph import Arg, DimMap, OpGraph, TensorType

ROOT = Path(__file__).resolve().parents[2]

DOT = "stablehlo.dot_general"
ELEM = DimMap(operands=((0, 1),))
ELEM2 = DimMap(operands=((0, 1), (0, 1)))
MATMUL = DimMap(operands=((0, -1), (-1, 1)), reduced=((1, 0),))  # [M,K] x [K,N] -> [M,N]
MATMUL_TN = DimMap(operands=((-1, 0), (-1, 1)), reduced=((0, 0),))  # [K,M]^T x [K,N] -> [M,N]
MATMUL_NT = DimMap(operands=((0, -1), (1, -1)), reduced=((1, 1),))  # [M,K] x [N,K]^T -> [M,N]


def topology(name: str = "h100-1x8") -> Topology:
    from planmap.spec.loader import load_cluster

    return Topology.from_spec(load_cluster(ROOT / "specs" / "clusters" / f"{name}.yaml").spec)


def _graph(name, ops, args, results) -> OpGraph:
    """ops: (kind, op_name, operand value ids, result shape, DimMap, flops, backward); args: (name, shape, role)."""
    n_args = len(args)
    shape_of = [s for _, s, _ in args] + [o[3] for o in ops]
    nbytes = [4 * _prod(s) for s in shape_of]
    edge_value = [v for o in ops for v in o[2]]
    edge_dst = [i for i, o in enumerate(ops) for _ in o[2]]
    return OpGraph(
        name=name, kind=[o[0] for o in ops], op_name=[f"jit(step)/{o[1]}" for o in ops],
        flops=[o[5] for o in ops],
        bytes_accessed=[sum(nbytes[v] for v in o[2]) + nbytes[n_args + i] for i, o in enumerate(ops)],
        out_bytes=nbytes[n_args:], state_bytes=[0] * len(ops), dtype=["f32"] * len(ops),
        value_node=[-1] * n_args + list(range(len(ops))), value_index=list(range(n_args)) + [0] * len(ops),
        value_bytes=nbytes, edge_value=edge_value, edge_dst=edge_dst,
        args=[Arg(i, a[0], TensorType(a[1], "f32"), a[2], i) for i, a in enumerate(args)],
        results=results, outputs=[(TensorType(o[3], "f32"),) for o in ops], backward=[o[6] for o in ops],
        operands=[o[2] for o in ops], dim_maps=[o[4] for o in ops])


def _prod(s) -> int:
    out = 1
    for x in s:
        out *= x
    return out


def mlp(batch: int, d: int, hidden: int, *, train: bool = False) -> OpGraph:
    """Values: x=0, W1=1, W2=2 (dy=3 in training), then one per op in order: h, relu(h), y (training:
        dW2, dr, dh, dW1, dx — dx stands for the gradient a previous layer would need)."""
    args = [("x", (batch, d), "data"), ("w1", (d, hidden), "param"), ("w2", (hidden, d), "param")]
    if train:
        args.append(("dy", (batch, d), "data"))
    a = len(args)
    mm = 2.0 * batch * d * hidden
    ops = [(DOT, "layer0/dot_general", (0, 1), (batch, hidden), MATMUL, mm, False),
           ("stablehlo.maximum", "layer0/relu", (a,), (batch, hidden), ELEM, batch * hidden, False),
           (DOT, "layer1/dot_general", (a + 1, 2), (batch, d), MATMUL, mm, False)]
    results = [a + 2]
    if train:
        ops += [(DOT, "transpose(layer1)/dw", (a + 1, 3), (hidden, d), MATMUL_TN, mm, True),
                (DOT, "transpose(layer1)/dr", (3, 2), (batch, hidden), MATMUL_NT, mm, True),
                ("stablehlo.select", "transpose(layer0)/relu", (a, a + 4), (batch, hidden), ELEM2, batch * hidden,
                 True),
                (DOT, "transpose(layer0)/dw", (0, a + 5), (d, hidden), MATMUL_TN, mm, True),
                (DOT, "transpose(layer0)/dx", (a + 5, 1), (batch, d), MATMUL_NT, mm, True)]
        results = [a + 2, a + 6, a + 3, a + 7]
    return _graph("mlp-train" if train else "mlp", ops, args, results)
