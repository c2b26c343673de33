# Two entry points from a fresh clone (each sets up .venv first, once):
#   make run    execute every notebook headless and export the plots to results/
#   make test   run the test suite (GPU tests skip without a CUDA GPU)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup run test clean
setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

run: setup
	$(PY) scripts/run_notebooks.py

test: setup
	$(PY) -m pytest

clean:
	rm -rf .build .pytest_cache
