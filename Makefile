# Thin one-liners over the tools. `make demo` and `make test` are the two commands a newcomer needs.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
WORK   ?= work
# tritonserver (from the nvidia-pytriton wheel) and its backend's own Python environment live here
export SKEWGATE_TRITON_HOME ?= $(CURDIR)/.triton
# The component image; BASE_IMAGE defaults to one made here with debootstrap (no registry is reachable)
VERSION    := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' components/skewgate/__init__.py)
IMAGE      ?= skewgate:$(VERSION)
BASE_IMAGE ?= skewgate-base:bookworm

.PHONY: setup triton demo test test-packages test-unit lint compile bench clean images e2e-docker

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

# What the demo prints is also kept in $(WORK)/demo/output.txt: tests/test_readme.py checks the README's copy
# of it against that real run (.ci/run runs the demo before the tests).
demo: setup
	@mkdir -p $(WORK)/demo
	PYTHONUNBUFFERED=1 bash -o pipefail -c '$(BIN)/skewgate demo --workdir $(WORK)/demo | tee $(WORK)/demo/output.txt'

# One pytest worker per CPU (pytest-xdist), a test file on one worker (its module fixtures, e.g. the release gate's
# pipeline runs, are built once); the servers each worker starts take free ports, the library zoo is built once.
PYTEST_WORKERS ?= auto
test: $(VENV)/.installed-test triton test-packages
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile

# Debian packages some integration tests start: Prometheus (+ promtool) and its Pushgateway, headless Chromium.
# Installed when one is missing and this runs as root where apt-get exists; otherwise (or when apt cannot reach
# its mirror) nothing is installed, nothing fails, and those tests skip with the reason in pytest's summary.
DEBIAN_TEST_PACKAGES ?= prometheus prometheus-pushgateway chromium
test-packages:
	@missing=""; for package in $(DEBIAN_TEST_PACKAGES); do \
		command -v $$package >/dev/null 2>&1 || missing="$$missing $$package"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "apt-get install$$missing (for the integration tests)"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$missing >/dev/null; } || \
			echo "could not install$$missing: the tests that need them skip"; \
	fi

test-unit: $(VENV)/.installed-test
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not integration"

lint: $(VENV)/.installed-test
	$(BIN)/ruff check components tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

# the compiled pipelines shipped in pipelines/ for the KFP UI (tests/pipelines/test_shipped.py holds them current)
compile: setup
	SKEWGATE=$(BIN)/skewgate pipelines/compile.sh

bench: setup $(VENV)/.installed-test
	$(BIN)/python benchmarks/drift_bench.py
	$(BIN)/python benchmarks/export_bench.py
	$(BIN)/python benchmarks/probe_bench.py
	$(BIN)/python benchmarks/parity_bench.py
	$(BIN)/python benchmarks/stream_bench.py
	$(BIN)/python benchmarks/calibrate_bench.py

# Build the component image from a wheelhouse prepared here (the build needs no network); report its size.
images: setup
	docker/dockerd.sh $(WORK)/dockerd
	@if [ "$(BASE_IMAGE)" = "skewgate-base:bookworm" ]; then docker/make_base.sh $(BASE_IMAGE) $(WORK)/images; fi
	rm -rf $(WORK)/wheelhouse
	docker/wheelhouse.sh $(WORK)/wheelhouse $(BIN)/pip
	DOCKER_BUILDKIT=0 docker build --quiet --network host -f docker/Dockerfile \
		--build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(IMAGE) .
	@docker image ls --format 'built {{.Repository}}:{{.Tag}}  {{.Size}}' $(IMAGE)
	@docker image ls --format 'base  {{.Repository}}:{{.Tag}}  {{.Size}}' $(BASE_IMAGE)

# The release gate through Docker: kfp.local.DockerRunner on the image, a real mlflow server, Triton inside.
e2e-docker: images $(VENV)/.installed-test
	SKEWGATE_IMAGE=$(IMAGE) $(BIN)/pytest -m docker tests/integration/test_release_gate_docker.py

clean:
	rm -rf $(VENV) $(WORK) local_outputs .triton
