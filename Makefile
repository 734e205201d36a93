# The two commands of the README are `make all` and `make test`.
# Everything else is a step of those two.
PY = $(shell cat build/python 2>/dev/null || echo .venv/bin/python)
# the perfbook command (pyproject.toml [project.scripts]), beside the interpreter the setup chose
PERFBOOK = $(dir $(PY))perfbook
# pytest caches each test module's assertion rewrite as bytecode; with PYTHONDONTWRITEBYTECODE set
# (as some shells export it) it rewrites all of them on every run: collecting the unit tier took
# 19 s against 9.5 s here
unexport PYTHONDONTWRITEBYTECODE
PROFILE ?= default
PYTEST_ARGS ?=
# CHAPTERS=a,b measures only those; MEASURE_ARGS passes more, e.g. --param data_dir=/tmp/d
CHAPTERS ?=
MEASURE_ARGS ?=
MEASURE = $(PERFBOOK) measure --profile $(PROFILE) $(if $(CHAPTERS),--chapters $(CHAPTERS)) $(MEASURE_ARGS)
NOTEBOOKS = $(PERFBOOK) refresh --changed
BOOK = $(PERFBOOK) book

.PHONY: all setup measure notebooks notebooks-all book summary compare test test-fleet test-unit test-notebooks test-site test-live clean sweep doctor

## all: set up, measure this machine (PROFILE=default), refresh the chapters, build the site.
## A failed chapter still gets the book built and the summary printed, then `make` fails;
## an interrupted measure, refresh or book build (Ctrl-C: exit 130, SIGTERM: 143, SIGHUP: 129)
## stops at once. The steps run in this one recipe, so that make adds one line of its own.
all: setup
	@rc=0; $(MEASURE) || rc=$$?; \
	case $$rc in 129|130|143) exit $$rc;; esac; \
	step=0; $(NOTEBOOKS) && $(BOOK) || step=$$?; \
	case $$step in 0) ;; 129|130|143) exit $$step;; *) rc=$$step;; esac; \
	$(PERFBOOK) summary; \
	$(PERFBOOK) compare || true; \
	exit $$rc

setup:
	bash tools/setup.sh

measure: setup
	@$(MEASURE)

## notebooks: re-execute, in explain mode, the chapters whose data or code changed since they
## were stored (tools/perfbook/book/freshness.py), so stored outputs follow data/; `make notebooks-all` runs all
notebooks:
	$(NOTEBOOKS)

notebooks-all:
	$(PERFBOOK) refresh

## book: render the stored notebooks into _build/html, warnings are errors
book:
	@$(BOOK)

summary:
	$(PERFBOOK) summary

## compare: where this host sits among all hosts, per key finding (make all ends with it)
compare:
	$(PERFBOOK) compare

NBVAL = --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg
NOTEBOOK_FILES = chapters summary.ipynb hosts.ipynb
# the tests run in one worker more than there are CPUs, at most 4 (pytest-xdist):
# tests/conftest.py keeps the live tests in one group, the site's in another, and each other
# file in one; TEST_WORKERS=0 runs them in this process, one after another. One worker more
# because the live group runs one test at a time and much of it waits (a kernel's start, a
# signal's restore), and it is the longest lane: a fresh clone's `make test` here (2 CPUs,
# 2026-11-28) took 678 s with 3 workers, 701 s with 4 and 722-802 s with 2
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --maxprocesses 4 --dist loadgroup --no-loadscope-reorder)

## test: set up, then every tier below in one run (the README's command; .ci/run calls it)
test: setup
	$(PY) -m pytest tests $(NOTEBOOK_FILES) $(NBVAL) $(XDIST) $(PYTEST_ARGS)

## test-unit: pure tests on fixtures, in under a minute (no root, no notebook, no book build)
test-unit: setup
	$(PY) -m pytest tests -m unit -q $(PYTEST_ARGS)

## test-notebooks: each notebook executed once, as another machine, against its stored
## outputs (nbval), and the tests that execute notebooks on other data
test-notebooks: setup
	$(PY) -m pytest tests $(NOTEBOOK_FILES) $(NBVAL) -m notebooks $(PYTEST_ARGS)

## test-site: the book built once, then opened in a browser
test-site: setup
	$(PY) -m pytest tests -m site $(PYTEST_ARGS)

## test-live: collect runs and kernel state (run as root: sudo make test-live)
test-live: setup
	$(PY) -m pytest tests -m live $(PYTEST_ARGS)

## test-fleet: the hosts page and the site in a browser with a 100-host synthetic fleet (~15 min)
test-fleet: setup
	PERFBOOK_TEST_FLEET=100 $(PY) -m pytest tests/test_site_browser.py -k fleet $(PYTEST_ARGS)

sweep:
	$(PERFBOOK) sweep

doctor:
	$(PERFBOOK) doctor

clean:
	rm -rf build _build
