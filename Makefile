PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
PKGS    := specs reference optimized model_tests pagedkv

.PHONY: setup test lint typecheck pytest wheel fuzz bench soak clean

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

# Figures, never asserts: the serving workload on the optimized manager, beside the commit this
# work started from (BASELINE), the reference and the control loop, and the kernels. Takes some
# minutes; writes bench/pagedkv-bench.json and .png.
BASELINE ?= c4e2953
bench:
	$(BIN)/pagedkv bench --kernels --baseline $(BASELINE) --json bench/pagedkv-bench.json --plot bench/pagedkv-bench.png

# A long lockstep soak of the optimized manager (exact mode).
soak:
	$(BIN)/pagedkv soak --steps 1000000

clean:
	rm -rf $(VENV) .hypothesis .mypy_cache .ruff_cache *.egg-info build dist
