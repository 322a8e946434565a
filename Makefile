# The two commands: `make demo` and `make test`. Each sets up what it needs on a fresh machine:
# Python >= 3.11 and Node.js (npm) must be there; `make test` also installs Debian's chromium
# (apt-get, through sudo unless root) for the browser tests. The demo needs no browser here.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.gpuburst-installed
UV_VERSION := 0.13.8
# uses the system's certificates, as pip does here (PIP_CERT)
UV_INSTALL := $(BIN)/uv pip install --quiet --system-certs --python $(BIN)/python

.PHONY: setup demo-setup demo test test-unit bench clean lint lint-py lint-ts labextension chromium gpu-bundle gpu-check

setup: $(STAMP) labextension chromium

# what the demo needs: the package and the lab extension (and, through npm, the proxy)
demo-setup: $(STAMP) labextension

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# uv installs what pip would (the same versions, checked against `pip freeze`), in about a
	@# quarter of the time: 12 s against 52 on a warm machine, in every fresh clone's setup,
	@# which nothing else overlaps. Its cache is uv's own, outside the repository.
	$(BIN)/python -m pip install --quiet 'uv==$(UV_VERSION)'
	@# the installer would otherwise uninstall the old copy's files through the dev link, deleting the build
	@test ! -L $(LABEXT_LINK) || rm $(LABEXT_LINK)
	@# The build backend goes into the venv, from pyproject.toml's [build-system], and builds there:
	@# an isolated build would install it (JupyterLab included) again in a throwaway env first.
	$(BIN)/python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires'], sep='\n')" \
		| $(UV_INSTALL) editables -r /dev/stdin
	@# The lab extension is built below, once, from `npm ci`'s node_modules: the build hook would
	@# otherwise `npm install` and build it here too.
	@# Every hub and server process imports jsonschema (through jupyter_events), which without
	@# rfc3987 imports rfc3987_syntax instead, and that builds 35 Earley parsers at import: 1 s
	@# of CPU per process, about 400 of them in `make test`, for IRI formats no Jupyter schema
	@# uses. With rfc3987 (jsonschema's first choice) a hub starts on half the CPU. It is GPL:
	@# installed here only, never a dependency of the package. pip stays, upgraded: tests run
	@# `python -m pip` as a user would.
	HATCH_JUPYTER_BUILDER_SKIP_NPM=1 $(UV_INSTALL) --no-build-isolation -e '.[test]' 'rfc3987==1.3.8' \
		--upgrade-package pip pip
	@touch $(STAMP)

# Lab extension: npm workspace at the root (lockfile committed), prebuilt into
# jupyter_gpuburst/labextension, linked into the venv like `jupyter labextension develop`.
NPM_STAMP := node_modules/.gpuburst-installed
LABEXT_OUT := jupyter_gpuburst/labextension/package.json
LABEXT_SRC := $(wildcard labextension/src/* labextension/style/* labextension/style/icons/* labextension/schema/*) \
	labextension/package.json labextension/tsconfig.json
LABEXT_LINK := $(VENV)/share/jupyter/labextensions/jupyter-gpuburst
CHROMIUM := /usr/bin/chromium-headless-shell
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(NPM_STAMP): package.json package-lock.json labextension/package.json
	npm ci --no-audit --no-fund
	@touch $@

$(LABEXT_OUT): $(NPM_STAMP) $(LABEXT_SRC) | $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" npm run build:prod

labextension: $(LABEXT_OUT)
	@if [ ! -L $(LABEXT_LINK) ]; then rm -rf $(LABEXT_LINK); mkdir -p $(dir $(LABEXT_LINK)); \
		ln -s $(CURDIR)/jupyter_gpuburst/labextension $(LABEXT_LINK); fi

# Browser tests drive Debian's chromium-headless-shell (Chromium's own headless build, which
# Playwright also uses for headless runs); no browser is downloaded from anywhere else.
chromium:
	@test -x $(CHROMIUM) || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium-headless-shell; }

# Type-check, lint and unit-test the lab extension's TypeScript.
lint-ts: $(NPM_STAMP)
	npm run --silent typecheck
	npm run --silent lint
	npm run --silent test

# Lint and format check of the Python code (rules in pyproject.toml's [tool.ruff]); fix with
#   .venv/bin/ruff check --fix . && .venv/bin/ruff format .
lint-py: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

lint: lint-py lint-ts

demo: demo-setup
	$(BIN)/gpuburst demo

# Most tests wait on processes (hubs, servers, kubelets), not on the CPU: they run in parallel,
# a file per worker. Browser tests run in a pytest of their own (Playwright's sync API owns its
# worker's event loop), two files at a time (each worker drives a chromium of its own). The two
# tiers run side by side (each one's output shows when it ends): the browser tests mostly wait
# (a GPU kernel's delayed start, a culling timeout) while the others use the CPU; on 2 CPUs
# that took 12.4 min against 14.3 one after the other. TIER_JOBS=1 runs them one after the
# other (on one CPU, the default); `make test-py` or `make test-browser` runs one alone.
TEST_WORKERS ?= 3
BROWSER_WORKERS ?= 2
TIER_JOBS ?= $(if $(filter 1,$(shell nproc 2>/dev/null || echo 1)),1,2)

# Setup's steps run two at a time where they do not need each other (pip beside npm ci and
# chromium's install, and the real control plane's build where Go is present), then the lints
# and a collection of every test (test-collect) beside each other (lint-ts compiles into
# labextension/lib, which the lab extension's build clears: not beside setup), then the tiers
# (tools/test-lanes): the py and browser tiers side by side, and the kube tier where Go is
# present as soon as the first of them ends. Each tier writes its whole output to .test-logs/
# and prints progress lines while it runs, then its failures (with their logs' tails) and its
# summary (tools/test-tier).
.PHONY: test-py test-browser test-kube
test:
	@$(MAKE) --no-print-directory -j2 --output-sync=target setup $(if $(GO),kube)
	@# About 500 processes import this package (every hub, server, kernel and emulator). Where
	@# PYTHONDONTWRITEBYTECODE is set (it is where these figures were taken), each compiled what it
	@# imports again: 0.2 s of CPU per hub. Compiled once here (a changed file's stale copy is
	@# ignored, by its source's mtime).
	@$(BIN)/python -m compileall -q -j0 jupyter_gpuburst tests/helpers
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint-py lint-ts test-collect
	@# exec: make passes a SIGTERM to its own child only, and a shell between them would die of
	@# it, leaving the tiers running
	@exec env MAKE="$(MAKE)" TIER_JOBS=$(TIER_JOBS) tools/test-lanes $(if $(GO),kube)

# Every test collected once, beside the lints: pytest caches each test module with its asserts
# rewritten (tests/conftest.py), and the tiers' pytest processes, which start at once, then read
# that cache instead of each rewriting all of it (12 CPU seconds a process, 6 with the cache).
TEST_LOGS := $(or $(GPUBURST_TEST_LOGS),.test-logs)
.PHONY: test-collect
test-collect: $(STAMP)
	@mkdir -p $(TEST_LOGS)
	@$(BIN)/python -m pytest --collect-only -q -p no:randomly > $(TEST_LOGS)/collect.log 2>&1 \
		|| { cat $(TEST_LOGS)/collect.log; exit 1; }

# In `make test` where Go is present, the emulator tier's tests that the kube tier runs
# (KUBE_TESTS) run there alone, judged by the real control plane: each once, not twice on a
# CPU-bound machine. `make test-py` alone runs them all.
KUBE_RUNS_INSTEAD = $(if $(and $(GO),$(KUBE_TIER_RUNS)),$(addprefix --deselect ,$(filter-out tests/kube/%,$(KUBE_TESTS))))
test-py: setup
	@exec tools/test-tier py -q -ra -m "not browser and not kube" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(KUBE_RUNS_INSTEAD)

BROWSER_TIER = tools/test-tier browser -q -ra -m browser -n $(BROWSER_WORKERS) --dist loadfile --no-loadscope-reorder
test-browser: setup
	@$(BROWSER_TIER)

# The real control plane's tier (docs/emulator.md): kube-apiserver, kube-scheduler,
# kube-controller-manager and etcd built here (make kube), the hub as its ServiceAccount.
# The emulator tiers' own files named here run unchanged on it (GPUBURST_CONTROL_PLANE=kube
# switches the shared fixtures), several tests at a time (KUBE_WORKERS: the tests mostly wait on
# the control planes, which each worker keeps from one test to the next), the longest first (a minute or more each: the
# rush, the budget's and culling's waits; last in line, the rush ended the tier). Their origins'
# audit logs gather in KUBE_AUDIT; then
# KUBE_JUDGES read them: tests/kube/test_zz_hub_rbac.py judges the hub's RBAC by everything the
# hub did before it, test_zz_admission.py what it sent. Of the emulator tier's longer files, the
# tests that reach what the prestarted ones do not: GPU kernels on the origin and a donor (the
# donor's kernel namespace installed as docs/install.md says), culling of an idle server and an
# idle kernel, a kernel stopped over its budget (accounting from the pods' real events), a
# kernel's use in the ledger, a GPU kernel through its donor's loss (the donor's control plane
# SIGKILLed), a donor spawn (and the namespace's offloading), the Unschedulable redirect from
# kube-scheduler's own refusal, home volumes (the site's provisioner), the queue's cancel that
# deletes an unused claim, a small `bench rush` in kernel mode (pre-started kernels adopted),
# pods/exec and pods/log through kube-apiserver to our node agent's kubelet API, and a pod
# offloaded through Liqo's own virtual kubelet and ShadowPod controller (built by `make kube`),
# which pins our emulator's Liqo to Liqo's.
KUBE_TESTS := tests/kube/test_rush_kube.py \
	tests/hub/culling/test_budget_hub.py::test_a_gpu_kernel_over_budget_is_warned_then_stopped_and_its_notebook_hears_why \
	tests/hub/culling/test_hub.py::test_idle_gpu_server_is_warned_kept_once_then_stopped_and_the_spawn_page_says_why \
	tests/hub/culling/test_kernels.py::test_idle_gpu_kernel_is_warned_then_stopped_and_a_computing_one_is_kept \
	tests/kube/test_site.py \
	tests/hub/kernels/test_kernels_integration.py::test_a_gpu_kernel_on_a_donor_lost_for_a_while_keeps_running_once_and_nothing_is_left \
	tests/hub/pools/test_prestarted_integration.py \
	tests/hub/kernels/test_kernels_integration.py::test_cpu_server_runs_gpu_kernels_on_origin_then_donor \
	tests/hub/accounting/test_right_sizing_hub.py::test_a_gpu_kernels_use_reaches_the_ledger_through_its_server \
	tests/hub/spawner/test_spawner_integration.py::test_capacity_stolen_after_decision_is_redirected_to_donor \
	tests/hub/spawner/test_storage_and_profile_policy.py::test_scratch_on_donor_mounts_home_on_the_origin_and_scratch_on_the_donor \
	tests/hub/spawner/test_queue_integration.py::test_the_queue_says_place_and_wait_live_and_cancel_leaves_nothing \
	tests/hub/pools/test_pools_integration.py::test_a_donor_pool_gives_way_to_a_spawn_that_needs_its_room \
	tests/kube/test_apiserver_restart.py tests/kube/test_doctor_kube.py tests/kube/test_kubepool.py tests/kube/test_kubelet_api.py \
	tests/kube/test_liqo_virtual_kubelet.py
KUBE_JUDGES := tests/kube/test_zz_admission.py tests/kube/test_zz_hub_rbac.py
# three: four in `make test`, tried once, was no faster (that run was slower in every tier)
KUBE_WORKERS ?= 3
# a worker's tests share one event loop, so that each worker keeps its federation from one test
# to the next, put back as it started (tests/helpers/kubepool.py): 11.5 CPU-s and 10-12 s a start
KUBE_ONE_LOOP := -o asyncio_default_test_loop_scope=session -o asyncio_default_fixture_loop_scope=session
KUBE_AUDIT := $(abspath $(TEST_LOGS)/kube-audit)
KUBE_TIER = (rm -rf $(KUBE_AUDIT); export GPUBURST_CONTROL_PLANE=kube GPUBURST_KUBE_AUDIT_DIR=$(KUBE_AUDIT); \
	tools/test-tier kube -q -ra -n $(KUBE_WORKERS) --dist load $(KUBE_ONE_LOOP) $(KUBE_TESTS) \
	&& tools/test-tier kube-judges -q -ra $(KUBE_JUDGES))
test-kube: setup kube
	@$(KUBE_TIER)

# Proof by repetition (tools/flake-check): each browser test file and each test once known to
# flake, 10 times in a row beside two busy loops. Long (an hour or more on 2 cores): not in `make test`.
.PHONY: flake-check
flake-check: setup
	tools/flake-check

test-unit: setup
	$(BIN)/python -m pytest -q -ra -m "not integration and not browser"

# The real control plane (kube-apiserver, kube-scheduler, kube-controller-manager, etcd) from
# their Go modules at the release pinned in tools/kube/, cached per machine outside the
# repository (~/.cache/jupyter-gpuburst/kube); a build whose pins are unchanged is reused at once.
GO := $(shell command -v go 2>/dev/null)
.PHONY: kube
kube:
	@tools/kube/build >/dev/null

bench: setup
	$(BIN)/gpuburst bench placement --nodes 5000 --pods 50000 --json

clean:
	rm -rf $(VENV) build dist .pytest_cache node_modules labextension/lib jupyter_gpuburst/labextension

# KubeSpawner's own test suite, unmodified, against `gpuburst sim` (docs/emulator.md), on the
# emulator or, with CONTROL_PLANE=kube, on the real control plane. Its tests are vendored
# (tests/reference/kubespawner); it installs their runner as the release's CI did, from PyPI.
# Not part of `make test`: on a loaded machine its own test_spawn_start family loses a start race,
# on either control plane (docs/emulator.md).
.PHONY: kubespawner-suite
kubespawner-suite: $(STAMP) $(if $(filter kube,$(CONTROL_PLANE)),kube)
	CONTROL_PLANE=$(CONTROL_PLANE) tools/kubespawner-suite.sh

# The `gpu` tier on a machine with an NVIDIA GPU (docs/gpu.md). `make gpu-bundle` builds, here,
# the wheels tools/gpu-check installs there with nothing fetched (GPU_PYTHON_VERSION: that
# machine's Python, default 3.12.3); `make gpu-check` runs the tier and writes its figures to
# $$GPUBURST_GPU_FIGURES (default gpu-figures.json), there or on a GPU workstation after setup.
gpu-bundle: $(STAMP) labextension
	tools/gpu-bundle gpu-bundle

gpu-check:
	tools/gpu-check
