# Thin one-liners over the tools. `make demo` and `make test` are the two commands a newcomer needs.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
WORK   ?= work
# tritonserver (from the nvidia-pytriton wheel) and its backend's own Python environment live here
export SKEWGATE_TRITON_HOME ?= $(CURDIR)/.triton

.PHONY: setup triton demo test test-unit lint compile bench clean

# torch is installed first and pinned: `pip install torch==2.13.0` takes the CPU build from this machine's
# disk, where an unpinned torch would pull a multi-GB CUDA build.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0

$(VENV)/.installed-all: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[all]'
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-all
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed-all triton

triton: $(SKEWGATE_TRITON_HOME)/.installed

$(SKEWGATE_TRITON_HOME)/.installed: | $(VENV)/.installed-all
	$(BIN)/skewgate probe install --home $(SKEWGATE_TRITON_HOME)
	touch $@

demo: setup
	$(BIN)/skewgate demo --workdir $(WORK)/demo

test: $(VENV)/.installed-test triton
	$(BIN)/pytest

test-unit: $(VENV)/.installed-test
	$(BIN)/pytest -m "not integration"

lint: $(VENV)/.installed-test
	$(BIN)/ruff check components pipelines tests benchmarks
	$(BIN)/mypy

compile: setup
	$(BIN)/skewgate pipeline compile --pipeline release-gate --out $(WORK)/release_gate.yaml
	$(BIN)/skewgate pipeline compile --pipeline nightly-drift --out $(WORK)/nightly_drift.yaml

bench: setup
	$(BIN)/python benchmarks/drift_bench.py
	$(BIN)/python benchmarks/probe_bench.py
	$(BIN)/python benchmarks/parity_bench.py
	$(BIN)/python benchmarks/calibrate_bench.py

clean:
	rm -rf $(VENV) $(WORK) local_outputs .triton
