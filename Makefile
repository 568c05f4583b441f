# p4ina: `make emulate` and `make test` are all a new user needs (as root on Debian 12).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV        ?= .venv
PY          := $(VENV)/bin/python
P4INA       := $(VENV)/bin/p4ina
# Debian's python3: the venv sees its site-packages, where apt's Mininet lives.
SYSTEM_PY   ?= /usr/bin/python3
STAMP       := $(VENV)/.p4ina-installed
# p4runtime-shell's environment (it pins protobuf < 3.21, p4ina runs protobuf 6): `p4ina shell` finds it by this name
SHELL_VENV  := $(VENV)-shell
SHELL_STAMP := $(SHELL_VENV)/.p4ina-installed
PYTEST_ARGS ?=
EMULATE_ARGS ?=
# every failure kind of issue 36 by default, host deaths too (EMULATE_ARGS comes after: its flags win)
FAULTS_DEFAULTS := --host-policy shrink,spare --host-runs 3
SIMULATE_ARGS ?=

.PHONY: help setup system-deps venv lint test emulate emulate-faults simulate bench p4 p4-check clean-net clean

help:
	@echo "make emulate   install what is missing, run the main experiment (embedded switch): bandwidth and latency presets"
	@echo "make emulate-faults  a switch killed mid all-reduce, loss, duplication and reordering, four jobs at once, register bit flips (experiments.faults.run)"
	@echo "make simulate  the same methods at 16 to 100,000 GPUs on SimGrid, calibrated on the emulation"
	@echo "make lint      ruff (lint and format), the import layering (lint-imports) and mypy"
	@echo "make test      install what is missing, run make lint, then the test suite"
	@echo "make bench     run the benchmarks, write results/bench.json"
	@echo "make p4        regenerate p4/generated and recompile p4/build with p4c (needs p4c-bm2-ss)"
	@echo "make clean-net remove namespaces, links and processes left by a crashed run"

setup: system-deps venv

system-deps:
	@bash scripts/install_system_deps.sh

# Reinstall when the dependency list or the packages change; otherwise this is a no-op. setuptools >= 77 (the
# build requirement) goes into the venv too: tests/test_install.py builds the package with it, without build
# isolation, so that the test downloads nothing.
$(STAMP): pyproject.toml setup.py | system-deps
	@test -x $(PY) || $(SYSTEM_PY) -m venv --system-site-packages $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip 'setuptools>=77' >/dev/null
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[test,torch]'
	@touch $@

$(SHELL_STAMP): scripts/shell-requirements.txt | system-deps
	@test -x $(SHELL_VENV)/bin/python || $(SYSTEM_PY) -m venv $(SHELL_VENV)
	@$(SHELL_VENV)/bin/python -m pip install -q --disable-pip-version-check -r scripts/shell-requirements.txt
	@touch $@

venv: $(STAMP) $(SHELL_STAMP)

# Each tool's configuration is in pyproject.toml (mypy checks the packages its `files` lists). All four run
# even when one fails, so one run shows every problem.
lint: setup
	@status=0; \
	echo "== ruff check"; $(PY) -m ruff check . || status=1; \
	echo "== ruff format --check"; $(PY) -m ruff format --check . || status=1; \
	echo "== lint-imports"; $(VENV)/bin/lint-imports --no-logo || status=1; \
	echo "== mypy"; $(PY) -m mypy || status=1; \
	exit $$status

# CI runs this: a lint failure stops it before the (long) suite.
test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

# Without EMULATE_ARGS: the bandwidth sweep, then the latency preset (small all-reduces over delayed links).
emulate: setup
ifeq ($(strip $(EMULATE_ARGS)),)
	@$(P4INA) emulate --preset bandwidth; a=$$?; $(P4INA) emulate --preset latency; b=$$?; \
	  if [ $$a -ne 0 ] || [ $$b -ne 0 ]; then echo "make emulate: a preset failed (bandwidth: $$a, latency: $$b)"; exit 1; fi
else
	$(P4INA) emulate $(EMULATE_ARGS)
endif

emulate-faults: setup
	$(P4INA) faults $(FAULTS_DEFAULTS) $(EMULATE_ARGS)

simulate: setup
	$(P4INA) simulate $(SIMULATE_ARGS)

bench: setup
	$(P4INA) bench $(BENCH_ARGS)

p4: setup
	$(PY) scripts/build_p4.py

p4-check: setup
	$(PY) scripts/build_p4.py --check

clean-net: setup
	$(P4INA) clean

clean:
	rm -rf $(VENV) $(SHELL_VENV) .pytest_cache .hypothesis .ruff_cache .mypy_cache .import_linter_cache
