# The two commands a newcomer needs: `make book` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export NO_MKDOCS_2_WARNING := 1

.PHONY: book site serve test test-gpu venv clean

venv: $(VENV)/.installed

# Recreate the environment when the pinned requirements change.
$(VENV)/.installed: requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

book: venv  ## site/ (both languages) and site/pdf/*.pdf
	$(BIN)/python build/build_book.py

site: venv  ## site/ only, no PDFs
	$(BIN)/python build/build_book.py --no-pdf

serve: venv  ## live preview on http://127.0.0.1:8000
	$(BIN)/mkdocs serve

test: venv  ## the whole suite (GPU tests skip without CUDA)
	$(BIN)/python -m pytest

test-gpu: venv  ## only the GPU tests, on a machine with CUDA
	$(BIN)/python -m pytest -m gpu

clean:
	rm -rf site .pytest_cache .cache
