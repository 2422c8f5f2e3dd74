# Two entry points for a fresh machine; each builds its own virtual environment.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: help demo test lint typecheck contracts clean

help:  ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.base: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev: $(VENV)/.base
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

demo: $(VENV)/.base  ## run the demo on the simulated plant
	$(BIN)/gpucontrol demo

lint: $(VENV)/.dev  ## ruff
	$(BIN)/ruff check .

typecheck: $(VENV)/.dev  ## mypy on gpucontrol, sysid, harness, cuda_kernels
	$(BIN)/mypy

contracts: $(VENV)/.dev  ## import contracts (which package may import which)
	$(BIN)/lint-imports

test: lint typecheck contracts  ## lint, types, import contracts, then the tests and doctests
	$(BIN)/python -m pytest -q

clean:  ## remove the virtual environment and results
	rm -rf $(VENV) results .pytest_cache .mypy_cache .ruff_cache
