# One setup command, one test command, one main job (see README).
PY ?= python3.10
# The core on current TensorFlow (requirements-core.txt); .python-version lists 3.12 second so
# pyenv resolves python3.12 inside the checkout.
PY_CORE ?= python3.12
VENV := .venv
BIN := $(VENV)/bin
CORE_VENV := .venv-core
CORE_BIN := $(CORE_VENV)/bin
export TF_CPP_MIN_LOG_LEVEL ?= 3
export TF_USE_LEGACY_KERAS ?= 0
export PYTHONWARNINGS ?= ignore::FutureWarning,ignore::DeprecationWarning

# The core's unit and golden tests: the layers that need no TFX / Beam (rlops/agents, envs, train,
# features' schema). Each test runs on one stack (tests/conftest.py, `--stack`): the core's fast
# tests on current TensorFlow only; its learning tests (marked slow) and heaviest strategy
# equivalence and resume trials (PPO under Mirrored/TPU strategies, on_policy's resume jobs) on
# the pinned stack only; the golden tests against TF-Agents' numbers on both.
CORE_TESTS := tests/agents tests/golden tests/envs tests/train tests/features/test_feature_schema.py
CORE_PYTEST := --stack core

.PHONY: setup run test test-fast test-core lint docs bench golden clean

setup: $(VENV)/.installed $(CORE_VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip wheel
	$(BIN)/pip install -q -r requirements.txt -r requirements-dev.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

$(CORE_VENV)/.installed: requirements-core.txt pyproject.toml
	$(PY_CORE) -m venv $(CORE_VENV)
	$(CORE_BIN)/pip install -q --upgrade pip wheel
	$(CORE_BIN)/pip install -q -r requirements-core.txt
	$(CORE_BIN)/pip install -q --no-deps -e .
	touch $@

# The main job: the local bandit pipeline (ExperienceGen -> Trainer -> Evaluator -> Pusher)
# with LocalDagRunner and a sqlite ML Metadata store under pipeline_root/bandit.
run: $(VENV)/.installed
	mkdir -p out
	$(BIN)/rlops run bandit --summary-json out/bandit_summary.json

# Everything, each part even when an earlier one failed (all failures show), failing if any did:
# the suite on the pinned stack but the core's fast tests (three pytest-xdist workers on two cores:
# the workers wait on subprocesses and disk, measured 12% faster than two on test-fast; a test file
# per worker at a time, so module fixtures are built once), and beside it the core on current
# TensorFlow, then lint and types: those two fill the cores while the suite waits on subprocesses
# and its last long files; their output follows the suite's. (No recursive $(MAKE) here:
# `make -n test` must only print, and a line naming $(MAKE) runs.)
XDIST = -n 3 --dist loadfile
# One compute thread per test process (TensorFlow's intra-op pool, OpenBLAS, OpenMP): three workers
# and their subprocesses on two cores otherwise spin-wait on each other's threads (test-fast, back
# to back, one pair: 279 s wall and 519 CPU-s against 299 s and 540).
TEST_THREADS = TF_NUM_INTRAOP_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
TEST_CMD = $(TEST_THREADS) $(BIN)/python -m pytest -q $(XDIST) --stack pinned --durations=25 tests
CORE_TEST_CMD = $(TEST_THREADS) $(CORE_BIN)/python -m pytest -q --durations=10 $(CORE_PYTEST) $(CORE_TESTS)
# The docs site (docs/, mkdocs.yml) builds with --strict: a broken link, a missing page or anchor
# fails it; it builds into a temporary directory and leaves nothing in the tree.
DOCS_CMD = site=$$(mktemp -d); NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $$site || status=1; rm -rf $$site
LINT_CMDS = $(BIN)/ruff check rlops tests benchmarks || status=1; \
	$(BIN)/ruff format --check rlops tests benchmarks || status=1; \
	$(BIN)/mypy || status=1; \
	$(DOCS_CMD)

test: setup
	@logs=$$(mktemp -d); \
	( $(CORE_TEST_CMD) > $$logs/core.log 2>&1; echo $$? > $$logs/core.rc ) & \
	( status=0; $(LINT_CMDS); echo $$status > $$logs/lint.rc ) > $$logs/lint.log 2>&1 & \
	status=0; \
	$(TEST_CMD) || status=1; \
	wait; \
	echo "== the core on current TensorFlow ($(CORE_VENV))"; cat $$logs/core.log; \
	echo "== lint, types and the docs build"; cat $$logs/lint.log; \
	[ "$$(cat $$logs/core.rc)" = 0 ] || status=1; \
	[ "$$(cat $$logs/lint.rc)" = 0 ] || status=1; \
	rm -rf $$logs; \
	exit $$status

# The inner loop: everything but the learning and end-to-end tests (marked slow).
test-fast: $(VENV)/.installed
	$(TEST_THREADS) $(BIN)/python -m pytest -q $(XDIST) -m "not slow" --durations=10 tests

test-core: $(CORE_VENV)/.installed
	$(CORE_TEST_CMD)

lint: $(VENV)/.installed
	@status=0; \
	$(LINT_CMDS); \
	exit $$status

# The docs site alone: `make docs` checks it as `make test` does; `.venv/bin/mkdocs serve` shows it.
docs: $(VENV)/.installed
	@status=0; \
	$(DOCS_CMD); \
	exit $$status

bench: $(VENV)/.installed
	@for b in benchmarks/*.py; do case $$b in */_*) continue;; esac; $(BIN)/python $$b; done

# Regenerates the TF-Agents golden fixtures (tests/golden/fixtures) in a separate Python 3.11
# virtualenv with tf-agents 0.19 / TensorFlow 2.15.1 (TF-Agents is frozen at TF 2.15).
GOLDEN_VENV := .venv-golden
golden:
	test -x $(GOLDEN_VENV)/bin/python || python3.11 -m venv $(GOLDEN_VENV)
	$(GOLDEN_VENV)/bin/pip install -q -r tests/golden/requirements.txt
	$(GOLDEN_VENV)/bin/python tests/golden/make_fixtures.py

clean:
	rm -rf $(VENV) $(CORE_VENV) .pytest_cache build *.egg-info
