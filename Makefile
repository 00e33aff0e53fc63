# One setup command, one test command, one main job (see README).
PY ?= python3.10
VENV := .venv
BIN := $(VENV)/bin
export TF_CPP_MIN_LOG_LEVEL ?= 3
export TF_USE_LEGACY_KERAS ?= 0
export PYTHONWARNINGS ?= ignore::FutureWarning,ignore::DeprecationWarning

.PHONY: setup run test bench golden clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip wheel
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

# The main job: the local bandit pipeline (ExperienceGen -> Trainer -> Evaluator -> Pusher)
# with LocalDagRunner and a sqlite ML Metadata store under pipeline_root/bandit.
run: setup
	mkdir -p out
	$(BIN)/rlops run bandit --summary-json out/bandit_summary.json

test: setup
	$(BIN)/python -m pytest -q tests

bench: setup
	@for b in benchmarks/*.py; do case $$b in */_*) continue;; esac; $(BIN)/python $$b; done

# Regenerates the TF-Agents golden fixtures (tests/golden/fixtures) in a separate Python 3.11
# virtualenv with tf-agents 0.19 / TensorFlow 2.15.1 (TF-Agents is frozen at TF 2.15).
GOLDEN_VENV := .venv-golden
golden:
	test -x $(GOLDEN_VENV)/bin/python || python3.11 -m venv $(GOLDEN_VENV)
	$(GOLDEN_VENV)/bin/pip install -q -r tests/golden/requirements.txt
	$(GOLDEN_VENV)/bin/python tests/golden/make_fixtures.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
