# Fresh machine: `make demo` runs the main job, `make test` runs the tests.
# Each target creates .venv and installs the package with what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

.PHONY: install test mutants dist demo reproduce paper field bench defaults recalibration \
	nested-tuning selection-scale lint
install: $(VENV)/.installed

test: $(VENV)/.installed
	.ci/postgres
	$(PY) -m pytest -q

# Hand-written privacy mutations (less noise, under-charges, leaks, a second ledger): each
# must make the suite fail. About 1.5 minutes; CI runs it after the tests.
mutants: $(VENV)/.installed
	$(PY) tests/mutants.py

# The sdist and the wheel (python -m build), checked to carry the package's type marker.
dist: $(VENV)/.installed
	rm -rf dist
	$(PY) -m build --outdir dist . >/dev/null
	$(PY) .ci/check_wheel.py

demo: $(VENV)/.installed
	$(VENV)/bin/renyiboost demo

reproduce: $(VENV)/.installed
	for ds in abalone adult; do for eps in 0.15 0.54; do \
	  $(VENV)/bin/renyiboost reproduce --dataset $$ds --epsilon $$eps --repeats 5 \
	    --json results/reproduce_$${ds}_$${eps}.json || exit 1; done; done

paper: $(VENV)/.installed
	$(VENV)/bin/renyiboost experiment --preset paper --repeats 2 --workers 2 --out results/paper

# The field tables (issue 15): the DP tree learners on held-out rows and DiPriMe's protocol, about 3 min.
field: $(VENV)/.installed
	$(VENV)/bin/renyiboost experiment --preset field --out results/field

# The defaults table: our defaults beside DP-EBM's and the trivial baseline on the
# development suite (about 8 minutes on 2 cores), then on the validation sets, written after
# the policy (20 s); writes benchmarks/results/defaults.md and validation.md.
defaults: $(VENV)/.installed
	$(PY) benchmarks/defaults.py
	$(PY) benchmarks/defaults.py --validation

# the answers' recalibration constants, checked on development rows (about 30 minutes)
recalibration: $(VENV)/.installed
	$(PY) benchmarks/recalibration.py --epsilon 1
	$(PY) benchmarks/recalibration.py --epsilon 4 --every 20000,40000 --shares 0.025,0.05
	$(PY) benchmarks/recalibration.py --epsilon 0.5 --every 20000,40000 --shares 0.025,0.05

# how much Abalone's tuned config gains from seeing its test folds: pooled against nested
# selection on one search (about a minute: 55 s in the last run)
nested-tuning: $(VENV)/.installed
	$(PY) benchmarks/nested_tuning.py

# the private selection's regression score scale, chosen on development rows and checked
# on the validation sets (about 3 minutes on 2 cores)
selection-scale: $(VENV)/.installed
	$(PY) benchmarks/selection_scale.py
	$(PY) benchmarks/selection_scale.py --validation

bench: $(VENV)/.installed
	$(PY) benchmarks/run.py
	$(PY) benchmarks/kafka_bench.py
	cd benchmarks && ../$(PY) sharded_bench.py
	cd benchmarks && ../$(PY) reshard_bench.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks
