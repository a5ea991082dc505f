PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
PKGS    := specs reference optimized model_tests pagedkv

.PHONY: setup test lint typecheck pytest wheel fuzz bench clean peers peers-fetch

setup:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'

test: lint typecheck pytest

lint:
	$(BIN)/ruff check $(PKGS)
	$(BIN)/ruff format --check $(PKGS)

typecheck:
	$(BIN)/mypy --strict $(PKGS)

pytest:
	$(BIN)/pytest -q --hypothesis-show-statistics

# The built wheel, installed into a fresh virtual environment without torch or dev extras and
# used as a new user would (pytest runs this too, as model_tests/tests/test_wheel.py).
wheel:
	$(BIN)/pytest -q model_tests/tests/test_wheel.py -s

# Long campaigns: the `fuzz` Hypothesis profile (see model_tests/machines/profiles.py).
fuzz:
	PAGEDKV_PROFILE=fuzz $(BIN)/pytest -q --hypothesis-show-statistics model_tests/tests/test_pool_lockstep.py model_tests/tests/test_manager_lockstep.py

bench:
	$(BIN)/python -m optimized.bench

clean:
	rm -rf $(VENV) .hypothesis .mypy_cache .ruff_cache *.egg-info build dist

# Real peers (model_tests/peers/, specs/peers.md): fetch their published wheels' block-manager
# files into .peers/ (nothing of theirs is committed), then check each against the reference.
# Not part of `make test`. PEERS_ARGS passes options, e.g. PEERS_ARGS="--steps 4000 --seed 3".
peers-fetch:
	$(BIN)/python -m model_tests.peers.run fetch

peers: peers-fetch
	$(BIN)/python -m model_tests.peers.run check $(PEERS_ARGS)
