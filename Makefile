# Two entry points for a fresh machine; each builds its own virtual environment.
# Every step writes its stamp file only after it succeeded, so a failed or interrupted
# install is redone on the next run; a .venv whose python no longer runs (a moved or
# upgraded system python) is rebuilt from scratch.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

ifneq ($(wildcard $(VENV)/.created),)
ifneq ($(shell $(BIN)/python -c "import pip" >/dev/null 2>&1 && echo ok),ok)
$(info $(VENV) is broken (its python or pip does not run): rebuilding it)
$(shell rm -f $(VENV)/.created $(VENV)/.base $(VENV)/.dev)
endif
endif

.PHONY: help demo test lint typecheck contracts clean

help:  ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

$(VENV)/.created:
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	touch $@

$(VENV)/.base: $(VENV)/.created pyproject.toml
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

# Two workers (pytest-xdist): most of the suite waits on real processes and timers, so two
# run side by side in a little over half the time, even beside another busy process. The
# closed loops on the real CPU plant and the duty cycles the sleep actuators achieve (marker
# `solo`) run after them, alone: their timing is the machine's, and a test beside them moves it.
test: lint typecheck contracts  ## lint, types, import contracts, then the tests and doctests
	$(BIN)/python -m pytest -q -n 2 --dist worksteal -m "not solo"
	$(BIN)/python -m pytest -q -m solo

clean:  ## remove the virtual environment and results
	rm -rf $(VENV) results .pytest_cache .mypy_cache .ruff_cache
