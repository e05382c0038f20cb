# planmap — every target sets itself up: `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
PLANMAP := $(VENV)/bin/planmap
STAMP  := $(VENV)/.installed
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8
export PYTHONHASHSEED = 0

DEMO_SPEC ?= specs/gpt-8dev.yaml
DEMO_PLAN := plans/$(basename $(notdir $(DEMO_SPEC))).plan.yaml

.PHONY: install demo test schemas goldens bench lint typecheck clean fixtures fuzz

# Re-install only when the project metadata or the pins change (idempotent, fast otherwise).
$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e '.[all]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PLANMAP) validate specs/*.yaml specs/clusters/*.yaml
	$(PLANMAP) solve $(DEMO_SPEC) -o $(DEMO_PLAN)
	$(PLANMAP) explain $(DEMO_PLAN) --png out/$(basename $(notdir $(DEMO_SPEC))).png
	$(PLANMAP) run $(DEMO_PLAN) --steps 3 --verify

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup

schemas: $(STAMP)
	$(PLANMAP) schema --out schemas

# Golden plans: one per example spec; tests/core/test_goldens.py fails when a solve no longer reproduces them.
goldens: $(STAMP)
	@for s in specs/*.yaml; do n=$$(basename $$s .yaml); $(PLANMAP) solve $$s -o plans/$$n.plan.yaml -q || exit 1; done

fixtures: $(STAMP)
	$(PY) tools/export_examples.py specs/models

# Quick modes; the paper-size runs are `bench/latency.py --scale` and `bench/throughput.py` (minutes each).
bench: $(STAMP)
	$(PY) bench/cost.py
	$(PY) bench/frontend.py
	$(PY) bench/solvers.py --quick
	$(PY) bench/latency.py --time-limit 20
	$(PY) bench/throughput.py --quick
	$(PY) bench/paper.py --quick
	$(PY) bench/runtime.py --steps 3
	$(PY) bench/memory.py
	$(PY) bench/profile.py --models mlp,cnn
	$(PY) bench/efficiency.py

# Reliability fuzzer (issue 18): mutated specs, clusters, plans, op-graph JSON and artifacts for DURATION seconds.
DURATION ?= 600
fuzz: $(STAMP)
	$(PY) tools/fuzz.py --duration $(DURATION) $(if $(JOBS),--jobs $(JOBS))

lint: $(STAMP)
	$(VENV)/bin/ruff check planmap solvers runtime tests bench tools

# mypy over planmap, planmap.solvers and planmap.runtime as installed (settings: [tool.mypy] in pyproject.toml).
typecheck: $(STAMP)
	$(PY) tools/typecheck.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
