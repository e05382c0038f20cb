"""A spec cannot make the MIP backend write files: solver.options is an allow-list per backend,
checked when the spec is validated and again by the MIP layer (issue 18, item 3)."""

from __future__ import annotations

import shutil

import pytest

from planmap.cli import main
from planmap.errors import PlanmapError
from planmap.spec.backend_options import ALLOWED, option_error


@pytest.fixture
def spec(root, tmp_path):
    shutil.copytree(root / "specs", tmp_path / "specs")
    return tmp_path / "specs" / "mlp-latency-cpu4acc.yaml"


def _with_options(spec, options: str, backend: str = "highs"):
    text = spec.read_text()
    assert "    backend: highs\n" in text
    spec.write_text(text.replace("    backend: highs\n", f"    backend: {backend}\n    options: {options}\n", 1))
    return spec


def _output(capsys) -> str:
    r = capsys.readouterr()
    return r.out + r.err


@pytest.mark.parametrize("options, code", [
    ("{log_file: LOG, output_flag: true}", "log_file"),
    ("{write_model_file: LOG, write_model_to_file: true}", "write_model_file"),
    ("{write_solution_to_file: true}", "write_solution_to_file"),
    ("{no_such_option: 1}", "no_such_option"),
])
def test_file_writing_and_unknown_options_are_spec_errors(spec, options, code, capsys, tmp_path):
    log = tmp_path / "evil.log"
    _with_options(spec, options.replace("LOG", str(log)))
    assert main(["validate", str(spec)]) == 1
    err = _output(capsys)
    assert f"error[option]: spec.solver.options.{code}: option '{code}' is not allowed for backend 'highs'" in err
    assert "mip_rel_gap" in err  # the allowed list
    assert main(["solve", str(spec), "-o", str(tmp_path / "p.plan.yaml"), "-q", "--solver", "ip"]) == 1
    assert not log.exists() and not (tmp_path / "p.plan.yaml").exists()


@pytest.mark.parametrize("backend, options", [("gurobi", "{LogFile: x.log}"), ("scip", "{display/verblevel: 5}"),
                                              ("cbc", "{printingOptions: all}"), ("cplex", "{workdir: /tmp}"),
                                              ("glpk", "{log: x}"), ("nosuch", "{threads: 1}")])
def test_every_backend_has_an_allow_list(spec, backend, options, capsys):
    _with_options(spec, options, backend)
    assert main(["validate", str(spec)]) == 1
    assert "error[option]" in _output(capsys)


@pytest.mark.parametrize("options", ["{mip_rel_gap: fast}", "{threads: -1}", "{threads: 1.5}", "{presolve: maybe}",
                                     "{time_limit: .inf}", "{random_seed: true}"])
def test_invalid_values_are_errors(spec, options, capsys):
    _with_options(spec, options)
    assert main(["validate", str(spec)]) == 1
    assert "must be" in _output(capsys)


def test_allowed_options_validate(spec):
    _with_options(spec, '{threads: 2, presolve: "on", mip_heuristic_effort: 0.1, random_seed: 3}')
    assert main(["validate", str(spec)]) == 0


def test_the_mip_layer_refuses_what_the_spec_would():
    from planmap.solvers.mip_backends import check_passthrough

    with pytest.raises(PlanmapError, match="log_file"):
        check_passthrough("highs", {"log_file": "/tmp/x"})
    check_passthrough("highs", {"threads": 2})
    assert all(option_error(b, k, 1) is None or "must be" in option_error(b, k, 1)[0]
               for b, opts in ALLOWED.items() for k in opts)
    assert not any("file" in k.lower() or k.lower().startswith("write") for opts in ALLOWED.values() for k in opts)
