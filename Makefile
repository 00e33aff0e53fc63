# One setup command, one test command, one main job (see README).
PY ?= python3.10
VENV := .venv
BIN := $(VENV)/bin
export TF_CPP_MIN_LOG_LEVEL ?= 3
export PYTHONWARNINGS ?= ignore::FutureWarning,ignore::DeprecationWarning

.PHONY: setup run test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip wheel
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

# The main job. Until the local TFX pipeline lands (issue 5) it trains PPO on CartPole-v1,
# evaluates the greedy policy and writes a learning curve under out/ppo.
run: setup
	$(BIN)/python -m rlops.train.on_policy --out out/ppo

test: setup
	$(BIN)/python -m pytest -q tests

bench: setup
	@for b in benchmarks/*.py; do case $$b in */_*) continue;; esac; $(BIN)/python $$b; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
