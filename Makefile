# Two entry points for a fresh machine; each builds its own virtual environment.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.base: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev: $(VENV)/.base
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

demo: $(VENV)/.base
	$(BIN)/gpucontrol demo

test: $(VENV)/.dev
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) results .pytest_cache
