"""Every artifact format loads (and ``auto`` detects it); bad files give an InputError naming the file."""

from __future__ import annotations

import numpy as np
import pytest

from planmap.errors import InputError
from planmap.frontend import load_model
from planmap.frontend.mlir import detect_format, read_bytes


@pytest.mark.parametrize("fmt", ["stablehlo", "vhlo", "exported", "mlirbc"])
def test_every_format_loads_and_auto_detects_it(artifacts, fmt):
    path = artifacts[fmt]
    assert detect_format(read_bytes(path)) == fmt
    auto = load_model(path)
    explicit = load_model(path, fmt)
    reference = load_model(artifacts["stablehlo"])
    for g in (auto, explicit):
        assert g.meta["format"] == fmt
        assert g.kind == reference.kind
        assert g.op_name == reference.op_name
        np.testing.assert_array_equal(g.flops, reference.flops)
        np.testing.assert_array_equal(g.edge_value, reference.edge_value)
        assert [a.name for a in g.args] == [a.name for a in reference.args]


def test_exported_keeps_its_calling_convention_info(artifacts):
    g = load_model(artifacts["exported"])
    assert g.meta["exported"]["fun_name"] == "_mlp_forward"
    assert g.meta["exported"]["nr_devices"] == 1


def test_vhlo_and_mlirbc_are_interchangeable_declarations(artifacts):
    assert load_model(artifacts["vhlo"], "mlirbc").num_nodes == load_model(artifacts["vhlo"]).num_nodes


def test_declared_format_mismatch_names_the_detected_format(artifacts):
    with pytest.raises(InputError, match=r"declared format 'vhlo', but the file is StableHLO text; use format: "
                                         r"stablehlo"):
        load_model(artifacts["stablehlo"], "vhlo")
    with pytest.raises(InputError, match="declared format 'stablehlo'"):
        load_model(artifacts["exported"], "stablehlo")


def test_model_format_enum_from_the_spec_is_accepted(artifacts):
    from planmap.spec.models import ModelFormat

    assert load_model(artifacts["vhlo"], ModelFormat.AUTO).meta["format"] == "vhlo"


@pytest.mark.parametrize("content, message", [
    (None, "model file not found"),
    (b"", "the file is empty"),
    (b"\x00\x01\x02garbage\xff" * 10, "not a model artifact planmap can read"),
    (b"module {\n  func.func @main( {\n}", "cannot parse the StableHLO text"),
    (b"this is not MLIR at all", "cannot parse the StableHLO text"),
    (b"module {}", "has no functions"),
    (b'{"format": "something/v9"}', "not a profiled op graph"),
])
def test_unreadable_inputs_give_an_input_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "model.mlir"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError, match=message) as info:
        load_model(path)
    assert str(path) in str(info.value)


def test_a_directory_is_not_a_model(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        load_model(tmp_path)


def test_missing_entry_function_lists_the_public_ones(models_dir):
    with pytest.raises(InputError, match=r"no entry function @forward; public functions: @main"):
        load_model(models_dir / "mlp.mlir", entry="forward")


def test_truncated_vhlo_is_an_input_error(artifacts, tmp_path):
    data = artifacts["vhlo"].read_bytes()
    path = tmp_path / "cut.vhlo"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=str(path)):
        load_model(path)


def test_bytes_that_crash_the_mlir_reader_are_absorbed_by_the_child_process(fixtures_dir):
    # This bit-flipped VHLO artifact segfaults MLIR's bytecode reader (checked when it was committed):
    # parsed in-process it would kill the test run.
    with pytest.raises(InputError, match=r"the file is corrupt: the MLIR reader crashed on it \(SIGSEGV\)"):
        load_model(fixtures_dir / "corrupt_crash.vhlo")


def test_a_location_that_is_not_utf8_is_absorbed_too(fixtures_dir, tmp_path):
    # The Python bindings abort the process when they read a string that is not UTF-8: found by the
    # fuzz test in a bit-flipped VHLO artifact, and reachable from text through hex escapes.
    with pytest.raises(InputError, match=r"crashed on it \(SIGABRT\)"):
        load_model(fixtures_dir / "corrupt_name.vhlo")
    text = tmp_path / "escaped.mlir"
    text.write_text('func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n'
                    '  %0 = stablehlo.negate %x : tensor<4xf32> loc("bad\\AA\\05name")\n'
                    '  return %0 : tensor<4xf32>\n}\n')
    with pytest.raises(InputError, match=r"crashed on it \(SIGABRT\)"):
        load_model(text)
    plain = tmp_path / "plain.mlir"
    plain.write_text(text.read_text().replace("\\AA\\05", "\\41"))  # an ASCII escape is harmless
    assert load_model(plain).op_name == ("badAname",)


def test_isolate_always_and_never_give_the_same_graph(artifacts):
    a = load_model(artifacts["stablehlo"], isolate="always")
    b = load_model(artifacts["vhlo"], isolate="never")
    assert a.kind == b.kind and a.total_flops == b.total_flops and a.meta["format"] == "stablehlo"
    with pytest.raises(ValueError, match="isolate requires"):
        load_model(artifacts["vhlo"], isolate="sometimes")


@pytest.mark.slow
def test_bytes_that_hang_the_mlir_reader_time_out(fixtures_dir):
    with pytest.raises(InputError, match=r"reading the model did not finish within 3 s; the file is probably"):
        load_model(fixtures_dir / "corrupt_hang.vhlo", parse_timeout=3)


def test_module_with_sdy_shardings_loads_and_keeps_them(tmp_path):
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import planmap.export as E

    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    def f(x, w):
        y = jax.lax.with_sharding_constraint(x @ w, NamedSharding(mesh, P("data", "model")))
        return jnp.tanh(y)

    jitted = jax.jit(f, in_shardings=(NamedSharding(mesh, P("data")), NamedSharding(mesh, P(None, "model"))))
    args = (jax.ShapeDtypeStruct((8, 16), jnp.float32), jax.ShapeDtypeStruct((16, 32), jnp.float32))
    for suffix in (".mlir", ".vhlo"):
        path = E.jax(jitted, *args, path=tmp_path / f"sharded{suffix}")
        g = load_model(path)
        sh = g.meta["shardings"]
        assert "data" in sh["meshes"]["mesh"] and "model" in sh["meshes"]["mesh"]
        assert set(sh["arguments"]) == {"0", "1"} and '"data"' in sh["arguments"]["0"]
        assert len(sh["constraints"]) == 1
        node = int(next(iter(sh["constraints"])))
        assert g.kind[node] == "sdy.sharding_constraint" and g.flops[node] == 0 and g.bytes_accessed[node] == 0
        assert g.total_flops == 2 * 8 * 16 * 32 + 8 * 32  # the dot and the tanh: shardings cost nothing


def test_unregistered_dialect_op_loads_with_a_bytes_based_cost(tmp_path):
    from planmap.frontend.costs import CostWarning

    path = tmp_path / "foreign.mlir"
    path.write_text("""
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "acme.magic"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "acme.magic"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = stablehlo.custom_call @my_kernel(%1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = stablehlo.custom_call @Sharding(%2) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}""")
    with pytest.warns(CostWarning) as record:
        g = load_model(path)
    assert len(record) == 1  # one warning per load, listing every kind once
    message = str(record[0].message)
    assert "acme.magic (2 ops)" in message and "stablehlo.custom_call @my_kernel (1 op)" in message
    assert "Sharding" not in message  # a known annotation target is free
    assert g.meta["unknown_ops"] == {"acme.magic": 2, "stablehlo.custom_call @my_kernel": 1}
    assert list(g.flops) == [32, 32, 32, 0]
    assert list(g.bytes_accessed) == [256, 256, 256, 0]
