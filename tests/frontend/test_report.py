"""``inspect``'s activation bytes are the peak of live results in topological order, not their sum."""

from __future__ import annotations

from planmap.frontend import load_model
from planmap.frontend.report import inspect_graph, peak_live_bytes
from planmap.graph import OpGraph


def _chain(sizes, skip: bool = False) -> OpGraph:
    """Ops 0..k-1 in a chain, op i making value i of ``sizes[i]`` bytes read by op i+1; with ``skip``,
    value 0 is also read by the last op (a residual connection keeps it alive throughout)."""
    k = len(sizes)
    edge_value, edge_dst = list(range(k - 1)), list(range(1, k))
    if skip:
        edge_value.append(0)
        edge_dst.append(k - 1)
    zeros = [0] * k
    return OpGraph(name="chain", kind=["stablehlo.add"] * k, op_name=[""] * k, flops=zeros, bytes_accessed=zeros,
                   out_bytes=sizes, state_bytes=zeros, dtype=["f32"] * k, value_node=list(range(k)),
                   value_index=zeros, value_bytes=sizes, edge_value=edge_value, edge_dst=edge_dst, results=[k - 1])


def test_a_chain_holds_two_results_at_a_time():
    assert peak_live_bytes(_chain([100] * 5)) == 200  # the sum is 500


def test_a_residual_stays_alive_to_its_last_reader():
    assert peak_live_bytes(_chain([1000, 10, 10, 10, 1])) == 1010  # value 0 freed after op 1 reads it
    assert peak_live_bytes(_chain([1000, 10, 10, 10, 1], skip=True)) == 1020  # held to op 4: 1000 + 10 + 10


def test_inspect_reports_the_peak_for_a_real_model(models_dir):
    g = load_model(models_dir / "gpt.mlir")
    s = inspect_graph(g)
    biggest = int(g.value_bytes[g.value_node >= 0].max())
    assert biggest <= s["activation_bytes"] < int(g.out_bytes.sum()) / 4
