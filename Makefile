# planmap — every target sets itself up: `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
PLANMAP := $(VENV)/bin/planmap
STAMP  := $(VENV)/.installed
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8
export PYTHONHASHSEED = 0

.PHONY: install demo test schemas goldens bench lint clean fixtures

# Re-install only when the project metadata or the pins change (idempotent, fast otherwise).
$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e '.[all]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PLANMAP) validate specs/*.yaml specs/clusters/*.yaml
	$(PLANMAP) inspect specs/models/gpt_small.mlir

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup

schemas: $(STAMP)
	$(PLANMAP) schema --out schemas

fixtures: $(STAMP)
	$(PY) tools/export_examples.py specs/models

bench: $(STAMP)
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

lint: $(STAMP)
	$(VENV)/bin/ruff check planmap solvers runtime tests bench tools

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
