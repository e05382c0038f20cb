"""Profiled op graphs (planmap.opgraph/v1) and the Tarnawski et al. input format."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from planmap.errors import InputError
from planmap.frontend import coarsen, load_model
from planmap.frontend.profiled import FORMAT, ProfiledGraph, dumps, loads

DOC = {
    "format": FORMAT,
    "name": "tiny",
    "timeUnit": "ms",
    "nodes": [  # deliberately not in topological order
        {"id": "fc2", "kind": "matmul", "time": {"cpu": 4.0, "gpu": 0.5}, "memoryBytes": 4096, "colocation": "L2"},
        {"id": "input", "kind": "input", "time": {"cpu": 0.1}},
        {"id": "fc1", "kind": "matmul", "time": {"cpu": 2.0, "gpu": 0.25}, "memoryBytes": 1024, "colocation": "L1",
         "flops": 1e6},
        {"id": "fc1_grad", "kind": "matmul", "time": {"cpu": 3.0, "gpu": 0.5}, "backward": True,
         "colocation": "L1", "layer": 0},
    ],
    "edges": [
        {"src": "input", "dst": "fc1", "bytes": 800},
        {"src": "fc1", "dst": "fc2", "bytes": 400, "transferTime": 0.02},
        {"src": "fc1", "dst": "fc1_grad", "bytes": 400, "transferTime": 0.02},
        {"src": "fc2", "dst": "fc1_grad", "bytes": 100},
    ],
}


def _write(tmp_path, doc, name="graph.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_profiled_graph_loads_in_topological_order(tmp_path):
    g = load_model(_write(tmp_path, DOC))
    assert g.meta["format"] == "opgraph" and g.meta["node_ids"] == ["input", "fc1", "fc2", "fc1_grad"]
    assert list(g.kind) == ["input", "matmul", "matmul", "matmul"]
    np.testing.assert_allclose(g.measured["cpu"], [1e-4, 2e-3, 4e-3, 3e-3])
    gpu = g.measured["gpu"]
    assert math.isnan(gpu[0]) and gpu[1:].tolist() == pytest.approx([2.5e-4, 5e-4, 5e-4])  # missing = unsupported
    assert list(g.state_bytes) == [0, 1024, 4096, 0]
    assert g.colocation[1] == g.colocation[3] != g.colocation[2] and g.colocation[0] == -1
    assert list(g.backward) == [False, False, False, True] and list(g.layer) == [-1, -1, -1, 0]
    # fc1's output goes to two consumers: one value, two edges, with its measured transfer time
    fc1_values = np.flatnonzero(g.value_node == 1)
    assert len(fc1_values) == 1 and g.value_bytes[fc1_values[0]] == 400
    assert g.value_time[fc1_values[0]] == pytest.approx(2e-5)
    assert sorted(g.edge_dst[g.edge_value == fc1_values[0]].tolist()) == [2, 3]
    assert math.isnan(g.value_time[g.value_node == 0][0])
    assert g.flops[1] == 1e6


def test_json_round_trip(tmp_path):
    g = load_model(_write(tmp_path, DOC))
    again = loads(dumps(g, time_unit="us"), where="round-trip")
    for col in ("flops", "bytes_accessed", "out_bytes", "state_bytes", "value_node", "value_index", "value_bytes",
                "edge_value", "edge_dst", "colocation", "backward", "layer"):
        np.testing.assert_array_equal(getattr(again, col), getattr(g, col), err_msg=col)
    np.testing.assert_allclose(again.value_time, g.value_time)
    assert again.kind == g.kind and again.meta["node_ids"] == g.meta["node_ids"]
    for dev in g.measured:
        np.testing.assert_allclose(again.measured[dev], g.measured[dev])
    ProfiledGraph.model_validate_json(dumps(g))  # what dumps writes validates against the model


def test_coarsening_a_profiled_graph_keeps_measured_times_and_classes(tmp_path):
    g = load_model(_write(tmp_path, DOC))
    c = coarsen(g, "fuse")  # profiled nodes are what the user measured: nothing is fused away
    assert c.num_nodes == g.num_nodes
    np.testing.assert_allclose(c.measured["cpu"], g.measured["cpu"])
    np.testing.assert_array_equal(c.colocation, g.colocation)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["edges"].append({"src": "fc1_grad", "dst": "input"}), "the edges form a cycle"),
    (lambda d: d["edges"].append({"src": "ghost", "dst": "fc1"}), "refers to node 'ghost'"),
    (lambda d: d["nodes"].append({"id": "fc1"}), "node id 'fc1' appears twice"),
    (lambda d: d["nodes"][0].update(memoryBytes=-1), "nodes.0.memoryBytes"),
    (lambda d: d.update(timeUnit="fortnight"), "timeUnit"),
    (lambda d: d["nodes"][0].update(speed=1), "nodes.0.speed: Extra inputs are not permitted"),
])
def test_invalid_documents_are_input_errors(tmp_path, mutate, message):
    doc = json.loads(json.dumps(DOC))
    mutate(doc)
    with pytest.raises(InputError, match=message):
        load_model(_write(tmp_path, doc))


def test_broken_json_points_at_the_position(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"format": "planmap.opgraph/v1",\n "nodes": [}')
    with pytest.raises(InputError, match=r"broken.json:2:12: error\[json\]: invalid JSON"):
        load_model(path)


TARNAWSKI = {
    "maxSizePerFPGA": 1e9, "maxFPGAs": 2, "maxCPUs": 1,
    "nodes": [
        {"id": 7, "name": "conv", "supportedOnFpga": 1, "cpuLatency": 12.5, "fpgaLatency": 1.25,
         "isBackwardNode": 0, "colorClass": 7, "size": 2048.0},
        {"id": 3, "name": "input", "supportedOnFpga": 0, "cpuLatency": 0.5, "fpgaLatency": 0.0,
         "isBackwardNode": 0, "size": 0},
        {"id": 9, "name": "conv_grad", "supportedOnFpga": True, "cpuLatency": 20.0, "fpgaLatency": 2.0,
         "isBackwardNode": 1, "colorClass": 7, "size": 2048.0},
    ],
    "edges": [
        {"sourceId": 3, "destId": 7, "cost": 0.25},
        {"sourceId": 7, "destId": 9, "cost": 0.5, "size": 1000},
        {"sourceId": 3, "destId": 9, "cost": 0.25},
    ],
}


def test_tarnawski_conversion(tmp_path):
    g = load_model(_write(tmp_path, TARNAWSKI, "resnet_tiny.json"))
    assert g.name == "resnet_tiny" and g.meta["node_ids"] == [3, 7, 9]
    assert g.op_name == ("input", "conv", "conv_grad")
    np.testing.assert_allclose(g.measured["cpu"], [5e-4, 12.5e-3, 20e-3])
    acc = g.measured["accelerator"]
    assert math.isnan(acc[0]) and acc[1:].tolist() == pytest.approx([1.25e-3, 2e-3])
    assert list(g.state_bytes) == [0, 2048, 2048]
    assert list(g.backward) == [False, False, True]
    assert g.colocation[1] == g.colocation[2] >= 0 and g.colocation[0] == -1
    # one output value per source node, carrying the edge cost as transfer time
    assert list(g.value_node) == [0, 1]
    np.testing.assert_allclose(g.value_time, [2.5e-4, 5e-4])
    assert list(g.value_bytes) == [0, 1000]
    assert sorted(zip(g.edge_value.tolist(), g.edge_dst.tolist(), strict=True)) == [(0, 1), (0, 2), (1, 2)]
    assert g.meta["profile"] == {"converted_from": "tarnawski", "maxSizePerFPGA": 1e9, "maxFPGAs": 2, "maxCPUs": 1}


def test_tarnawski_document_with_missing_fields_is_an_input_error(tmp_path):
    doc = json.loads(json.dumps(TARNAWSKI))
    del doc["nodes"][0]["id"]
    with pytest.raises(InputError, match="invalid Tarnawski et al. input document"):
        load_model(_write(tmp_path, doc))


def test_profiled_layer_ids_group_nodes(tmp_path):
    nodes = [{"id": i, "time": {"cpu": 1.0}, "layer": i // 2, "backward": i >= 6} for i in range(8)]
    nodes[6]["layer"], nodes[7]["layer"] = 2, 1  # backward of layers 2 and 1
    edges = [{"src": i, "dst": i + 1, "bytes": 4} for i in range(7)]
    g = load_model(_write(tmp_path, {"format": FORMAT, "nodes": nodes, "edges": edges}))
    c = coarsen(g, "layers")
    assert c.meta["coarsening"]["method"] == "layer ids"
    assert [len(c.members_of(i)) for i in range(c.num_nodes)] == [2, 2, 2, 1, 1]
    np.testing.assert_allclose(c.measured["cpu"], [2.0, 2.0, 2.0, 1.0, 1.0])
    assert list(c.layer) == [0, 1, 2, 2, 1] and list(c.backward) == [False, False, False, True, True]


def test_colocation_classes_that_meet_in_a_coarse_node_merge(tmp_path):
    nodes = [{"id": i, "time": {"cpu": 1.0}, "colocation": c, "layer": lay}
             for i, (c, lay) in enumerate([("a", 0), ("b", 0), ("c", 1), ("a", 2), ("b", 3)])]
    edges = [{"src": i, "dst": i + 1} for i in range(4)]
    c = coarsen(load_model(_write(tmp_path, {"format": FORMAT, "nodes": nodes, "edges": edges})), "layers")
    # layer 0 holds classes a and b: they become one class, which layers 2 and 3 then share
    assert c.num_nodes == 4 and c.colocation[0] == c.colocation[2] == c.colocation[3] != c.colocation[1]
