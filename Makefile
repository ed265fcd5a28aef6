# The two commands a newcomer needs: `make book` and `make test`. Both set up what they need:
# the Debian packages in requirements/apt.txt and a .venv with the pinned Python packages.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export NO_MKDOCS_2_WARNING := 1

.PHONY: book site serve release test test-book test-gpu check lock system-packages venv node-packages clean

venv: $(VENV)/.installed
node-packages: build/node_modules/.installed

# Recreate the environment when the pinned requirements change. tools/ is installed editable
# (pyproject.toml), so that every part of the build and the tests imports it as `tools`.
$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --editable .
	touch $@

# The Pyodide runtime the calculator pages serve (build/package.json; the lock pins its checksum).
# npm comes with the nodejs of requirements/apt.txt (NodeSource's package; Debian's needs `npm`).
build/node_modules/.installed: build/package-lock.json | system-packages
	npm ci --prefix build --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

# requirements/*.in: the direct dependencies by purpose; requirements.txt (everything, for make) and
# requirements/scripts.txt (for readers who only run the scripts) are their locks. The CPU wheel's
# local label is dropped so that the one pin installs the CUDA build on a machine with a GPU.
LOCK := $(BIN)/pip-compile --quiet --strip-extras --no-emit-index-url --no-emit-find-links
lock: venv  ## regenerate the locks after editing requirements/*.in
	$(LOCK) --output-file requirements.txt requirements/book.in requirements/scripts.in requirements/tests.in
	$(LOCK) --constraint requirements.txt --output-file requirements/scripts.txt requirements/scripts.in
	sed -i 's/^torch==\(.*\)+cpu$$/torch==\1/' requirements.txt requirements/scripts.txt

system-packages:  ## install the missing packages of requirements/apt.txt, or say how
	@tools/system_packages.sh

book: venv system-packages node-packages  ## site/ (both languages) and site/pdf/*.pdf; rebuilds only when an input changed
	$(BIN)/python build/build_book.py

site: venv node-packages  ## site/ only, no PDFs
	$(BIN)/python build/build_book.py --no-pdf

serve: venv node-packages  ## live preview on http://127.0.0.1:8000
	$(BIN)/python -m mkdocs serve

# VERSION=YYYY.MM: tools/release.py refuses a bad or existing version and a dirty tree, builds the
# site and PDFs into dist/, writes the CHANGELOG.md section and CITATION.cff, tags v$(VERSION), and
# commits the site to the local gh-pages branch with mike (nothing is pushed).
release: venv system-packages node-packages  ## release VERSION=YYYY.MM: tag, versioned site (gh-pages), PDFs, changelog
	$(if $(VERSION),,$(error VERSION=YYYY.MM is required, e.g. make release VERSION=2026.11))
	$(BIN)/python tools/release.py '$(VERSION)'

# pytest-xdist workers: one per core, at most 4. tests/worker_groups.py keeps each file on one
# worker and every test that starts two or more ranks or a SLURM job (tests.launchers.RANKS) on one
# worker, one after another. One worker more than the cores is about 10% faster here (about half
# the suite's time is waiting), but the ranks tests' timeouts then failed in 2 runs of 5.
# PYTEST_WORKERS= (empty) runs everything in one process.
PYTEST_WORKERS ?= -n $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 ))) --dist loadscope
# More pytest options, e.g. PYTEST_ARGS=--junitxml=pytest-report.xml (what tools/loop_bench.py reads).
PYTEST_ARGS ?=
# pytest keeps each test module compiled, with its asserts rewritten, in __pycache__ (git and the
# book build ignore those folders); with PYTHONDONTWRITEBYTECODE set it would redo that in every
# worker of every run, about 3 s a worker on 2 cores.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

# PART=network: only that part's tests (tests/network/ and its notebooks under nbval).
PART ?=
PART_PATHS = $(if $(PART),$(wildcard tests/$(PART) notebooks/$(PART)),)

test: $(if $(PART),venv node-packages,book)  ## the whole suite, on the book that `make book` built (GPU tests skip without CUDA); PART=name for one part
	$(if $(PART),$(if $(PART_PATHS),,$(error PART=$(PART): no tests/$(PART) or notebooks/$(PART))))
	$(PYTEST) $(PYTEST_WORKERS) $(PYTEST_ARGS) $(PART_PATHS)

# The book's own tests (site, PDFs, calculators, downloads, translations, lint), without the parts'
# scripts and notebooks: CI's book lane; `make test PART=name` is a part's lane.
BOOK_TESTS = tests/build tests/notebooks tests/tools $(wildcard tests/test_*.py)
test-book: book  ## the book's own tests on the book `make book` built (not the parts' scripts)
	$(PYTEST) $(PYTEST_WORKERS) $(PYTEST_ARGS) $(BOOK_TESTS)

# Paths given explicitly: pytest.ini's testpaths would bring the notebooks back despite --ignore.
check: venv node-packages  ## the quick part: no PDFs, notebooks, multi-rank or SLURM runs, or tests over ~2.5 s (pytest -m slow)
	$(PYTEST) $(PYTEST_WORKERS) $(PYTEST_ARGS) -m "not slow" tests --ignore=tests/build

test-gpu: venv  ## only the GPU tests, on a machine with CUDA
	$(PYTEST) -m gpu

clean:
	rm -rf site .pytest_cache .cache
