PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
PKGS    := specs reference optimized model_tests pagedkv

.PHONY: setup browser redis test lint typecheck pytest wheel fuzz bench soak crosshair exhaustive mutate clean peers peers-fetch corpus docs

setup:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	$(MAKE) --no-print-directory browser
	$(MAKE) --no-print-directory redis
	$(MAKE) --no-print-directory peers-fetch

# Headless Chromium and its driver for the trace viewer's browser test
# (model_tests/tests/test_teaching_browser.py): Debian's packages, installed where we are root
# with apt-get (as in CI); elsewhere the test is skipped, except under CI=true where it fails.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
		echo "browser test: $$(chromium --version 2>/dev/null | head -n1)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null && \
		echo "browser test: installed $$(chromium --version 2>/dev/null | head -n1)"; \
	else \
		echo "browser test: no Chromium and not root with apt-get; it will be skipped"; \
	fi

# Debian's redis-server for the test of check --database redis://
# (model_tests/tests/test_shared_failures.py): installed where we are root with apt-get (as in
# CI); elsewhere that test is skipped, except under CI=true where it fails.
redis:
	@if command -v redis-server >/dev/null; then \
		echo "redis test: $$(redis-server --version | head -n1)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null && \
		echo "redis test: installed $$(redis-server --version | head -n1)"; \
	else \
		echo "redis test: no redis-server and not root with apt-get; it will be skipped"; \
	fi

test: lint typecheck pytest

lint:
	$(BIN)/ruff check $(PKGS) docs
	$(BIN)/ruff format --check $(PKGS) docs

# One import name: mypy reads the folders as pagedkv.specs, pagedkv.reference ... through the
# links in pagedkv/ (README, "The layout"), so it is given the package, not the folders.
typecheck:
	$(BIN)/mypy --strict pagedkv

pytest:
	$(BIN)/pytest -q --hypothesis-show-statistics

# The built wheel, installed into a fresh virtual environment without torch or dev extras and
# used as a new user would (pytest runs this too, as model_tests/tests/test_wheel.py).
wheel:
	$(BIN)/pytest -q model_tests/tests/test_wheel.py -s

# The parts of specs/policy.md that specs/policy.py generates (the options' table and values),
# written between the page's markers; test_policy fails while the page is not current. Then the
# docs site (mkdocs.yml: README.md, specs/ and the API reference from the docstrings) into site/,
# in strict mode: a broken link or anchor fails it, as test_docs_site.py does in make test.
# NO_MKDOCS_2_WARNING drops material's banner on its end of life (May 2027; its successor,
# Zensical, reads this mkdocs.yml), so the output is the build's findings.
docs:
	$(BIN)/python -m pagedkv.model_tests.formal.policy_page specs/policy.md
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The corpus (specs/corpus.md): every wrong variant through `pagedkv check`'s default budget,
# seeds 0, 1 and 2; fails on any missed or reported with more than 12 steps. Writes the figures
# into specs/corpus.md's table and each variant's trace into model_tests/corpus/traces/ (`make
# test` replays those, and searches live for six variants).
corpus:
	$(BIN)/python -m pagedkv.model_tests.corpus.measure --jobs 2 --write specs/corpus.md

# Long campaigns: the `fuzz` Hypothesis profile (see model_tests/machines/profiles.py).
fuzz:
	PAGEDKV_PROFILE=fuzz $(BIN)/pytest -q --hypothesis-show-statistics model_tests/tests/test_pool_lockstep.py model_tests/tests/test_manager_lockstep.py

# CrossHair over the PEP 316 contracts of specs/ and reference/ and over each reference/optimized
# pair (crosshair diffbehavior); pytest runs a short pass (model_tests/tests/test_formal.py).
crosshair:
	$(BIN)/python -m pagedkv.model_tests.formal.crosshair_check --timeout 20 --pair-timeout 60

# Breadth first over every step sequence of tiny managers, reference against optimized at every
# state; prints states, transitions and the depth reached per configuration in a fixed time.
exhaustive:
	$(BIN)/python -m pagedkv.model_tests.machines.explorer --seconds 20

# The mutation score over reference/ and optimized/ (specs/mutation.md): the killers on the real
# code, then the three control mutants (exit 2, no score, if one misbehaves), then every mutant
# (SAMPLE=N: N per file, chosen with MUTATE_SEED), MUTATE_JOBS at a time, under the `mutate` profile.
# The whole set is 1,242 mutants of the files issue 22 names (the request level's files add 490): specs/mutation.md gives the time it takes.
SAMPLE ?= 0
MUTATE_SEED ?= 13
MUTATE_JOBS ?= 2
mutate:
	$(BIN)/python -m pagedkv.model_tests.formal.mutate --sample $(SAMPLE) --seed $(MUTATE_SEED) --jobs $(MUTATE_JOBS)

# Figures, never asserts: the serving workload on the optimized manager, beside the commit this
# work started from (BASELINE), the reference, the control loop, vLLM 0.6.3's manager under its
# own profile (where `make peers-fetch` has fetched it), the pool and the request level beside
# vLLM 0.33.0's, and the kernels. Takes some minutes; writes bench/pagedkv-bench.json and .png.
BASELINE ?= c4e2953
VLLM_V0_BENCH = $(if $(wildcard .peers/vllm-0.6.3.post1),--target pagedkv.model_tests.peers.vllm_v0_manager:VllmV0Manager --profile vllm-v0)
bench:
	$(BIN)/pagedkv bench --kernels --defrag --baseline $(BASELINE) $(VLLM_V0_BENCH) --json bench/pagedkv-bench.json --plot bench/pagedkv-bench.png

# A long lockstep soak of the optimized manager (exact mode).
soak:
	$(BIN)/pagedkv soak --steps 1000000

clean:
	rm -rf $(VENV) .hypothesis .mypy_cache .ruff_cache *.egg-info build dist site

# Real peers (model_tests/peers/, specs/peers.md): fetch their published wheels' block-manager
# files into .peers/ (nothing of theirs is committed), then check each against the reference:
# as the engine is and with its defects switched off, then as it is, stepping past its known
# defects (model_tests/peers/known/). `make setup` fetches them (wheels of 570 MB
# downloaded once, 0.5 MB of their files kept; a fetched peer is not downloaded again, and a
# second fetch needs no network), so `make test` runs the real-peer tests
# (model_tests/tests/test_peers.py, which fail under CI=true when the files are missing);
# the search itself is not part of `make test`. PEERS_ARGS passes options, e.g.
# PEERS_ARGS="--steps 4000 --seed 3".
peers-fetch:
	$(BIN)/python -m pagedkv.model_tests.peers.run fetch

peers: peers-fetch
	$(BIN)/python -m pagedkv.model_tests.peers.run check $(PEERS_ARGS)
	$(BIN)/python -m pagedkv.model_tests.peers.run check --known $(PEERS_ARGS)
