"""Artifacts for the front-end tests: the committed example models and fixtures, plus small modules
exported here (every format, control flow, shardings) so that each test reads a real JAX export."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "specs" / "models"
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="session")
def models_dir() -> Path:
    return MODELS


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> dict[str, Path]:
    """The example MLP in every format planmap reads, exported once per session."""
    from jaxlib.mlir import ir

    import planmap.export as E
    from planmap.examples.models import mlp
    from planmap.frontend.mlir import make_context
    from tests.frontend.helpers import abstract_args

    out = tmp_path_factory.mktemp("artifacts")
    args = abstract_args(mlp)
    paths = {fmt: E.jax(mlp.forward, *args, path=out / f"mlp{suffix}")
             for fmt, suffix in (("stablehlo", ".mlir"), ("vhlo", ".vhlo"), ("exported", ".jaxexport"))}
    ctx = make_context()
    with ctx:
        module = ir.Module.parse(paths["stablehlo"].read_text())
        bc = out / "mlp.mlirbc"
        with open(bc, "wb") as f:
            module.operation.write_bytecode(f)
    paths["mlirbc"] = bc
    return paths
