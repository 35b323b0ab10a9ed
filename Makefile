# rekon — build, test and demo entry points. See README.md.
SHELL := /bin/bash
CARGO ?= cargo
WASM_TARGET := wasm32-wasip2
WASM_PROFILE := wasm
WASM_OUT := target/$(WASM_TARGET)/$(WASM_PROFILE)
# The rekon binary the SDK test kits run `rekon plugin inspect` with.
REKON_BIN ?= target/debug/rekon
# Seed plugins shipped in dist/plugins (crate name -> file name).
SEED_PLUGINS := test-fanout nodepool
# Plugins that only exist for tests (misbehaving on purpose, fixtures).
TEST_PLUGINS := rekon-test-chaos

.PHONY: setup-test setup-demo all build plugins chaos-plugins zoo-plugin test-plugins sdk-deps sdk-plugins sdk-test seed-scenarios-ports test fmt-check clippy unit demo clean-dist wasm-target help

all: build plugins

help:
	@echo "make demo     build everything and run the demo on embedded kube-sim clusters"
	@echo "make test     fmt check, clippy -D warnings, plugin build and every test (the seed scenarios also with the TypeScript and Python ports)"
	@echo "make plugins  build the plugins for $(WASM_TARGET) into dist/plugins/"
	@echo "make sdk-test the TypeScript and Python SDKs' and ports' native tests"
	@echo "make sdk-plugins build the TypeScript and Python ports into dist/sdk-plugins/"

# What a fresh machine lacks (the wasm target, cargo-nextest, Debian's
# docker-registry, skopeo and prometheus, node/npm, the Python tools, the npm
# packages from the lock files): `make test` and `make demo` install it first,
# saying what and why (scripts/setup.sh).
setup-test:
	@scripts/setup.sh test

setup-demo:
	@scripts/setup.sh demo

wasm-target:
	@rustup target list --installed 2>/dev/null | grep -qx $(WASM_TARGET) || rustup target add $(WASM_TARGET)

build:
	$(CARGO) build -p rekon-host -p kube-sim -p rekon-e2e

# Seed plugins -> dist/plugins/<crate_name>.wasm
plugins: wasm-target
	@mkdir -p dist/plugins
	@pkgs=""; for p in $(SEED_PLUGINS); do [ -d plugins/$$p ] && pkgs="$$pkgs -p $$p"; done; \
	if [ -n "$$pkgs" ]; then \
	  $(CARGO) build --target $(WASM_TARGET) --profile $(WASM_PROFILE) $$pkgs && \
	  for p in $(SEED_PLUGINS); do f=$${p//-/_}; [ -f $(WASM_OUT)/$$f.wasm ] && cp $(WASM_OUT)/$$f.wasm dist/plugins/$$f.wasm; done; \
	fi; true
	@ls -l dist/plugins/ 2>/dev/null || true

# chaos v1 and v2 alone -> dist/test-plugins/ (the demo's live swap through
# a Plugin object; the tests' too).
chaos-plugins: wasm-target
	@mkdir -p dist/test-plugins
	$(CARGO) build --target $(WASM_TARGET) --profile $(WASM_PROFILE) -p rekon-test-chaos --features v2
	cp $(WASM_OUT)/rekon_test_chaos.wasm dist/test-plugins/chaos-v2.wasm
	$(CARGO) build --target $(WASM_TARGET) --profile $(WASM_PROFILE) -p rekon-test-chaos
	cp $(WASM_OUT)/rekon_test_chaos.wasm dist/test-plugins/chaos-v1.wasm

# The bug zoo (tests/zoo/plugin) -> dist/test-plugins/zoo.wasm: one plugin
# whose settings (tests/zoo/<bug>/buggy.json, fixed.json) pick a seeded
# controller bug or its fixed twin, for `rekon plugin explore`.
zoo-plugin: wasm-target
	@mkdir -p dist/test-plugins
	$(CARGO) build --target $(WASM_TARGET) --profile $(WASM_PROFILE) -p rekon-test-zoo
	cp $(WASM_OUT)/rekon_test_zoo.wasm dist/test-plugins/zoo.wasm

# Test fixtures -> dist/test-plugins/ (chaos in three builds, the bench
# plugin, cm-sync: a third plugin written like one from outside the project;
# hostile: one that tries to reach what it never declared; widgets: one
# that admits its objects (validate, mutate), and its build with feature
# conversion: the CRD at two versions, converted by the plugin; the zoo).
# Feature builds overwrite the same target file, hence one build per copy.
test-plugins: chaos-plugins zoo-plugin
	$(CARGO) build --target $(WASM_TARGET) --profile $(WASM_PROFILE) -p rekon-test-chaos --features broken-register
	cp $(WASM_OUT)/rekon_test_chaos.wasm dist/test-plugins/chaos-broken-register.wasm
	$(CARGO) build --target $(WASM_TARGET) --profile $(WASM_PROFILE) -p rekon-test-widgets --features strict
	cp $(WASM_OUT)/rekon_test_widgets.wasm dist/test-plugins/widgets-strict.wasm
	$(CARGO) build --target $(WASM_TARGET) --profile $(WASM_PROFILE) -p rekon-test-widgets --features conversion
	cp $(WASM_OUT)/rekon_test_widgets.wasm dist/test-plugins/widgets-conversion.wasm
	$(CARGO) build --target $(WASM_TARGET) --profile $(WASM_PROFILE) -p rekon-test-chaos -p rekon-bench-node -p rekon-bench-fanout -p rekon-test-cm-sync -p rekon-test-hostile -p rekon-test-widgets
	cp $(WASM_OUT)/rekon_test_chaos.wasm dist/test-plugins/chaos-v1.wasm
	cp $(WASM_OUT)/rekon_test_hostile.wasm dist/test-plugins/hostile.wasm
	cp $(WASM_OUT)/rekon_bench_node.wasm dist/test-plugins/bench-node.wasm
	cp $(WASM_OUT)/rekon_test_cm_sync.wasm dist/test-plugins/cm-sync.wasm
	cp $(WASM_OUT)/rekon_test_widgets.wasm dist/test-plugins/widgets.wasm
	$(CARGO) build --target $(WASM_TARGET) --profile $(WASM_PROFILE) -p rekon-test-gadgets
	cp $(WASM_OUT)/rekon_test_gadgets.wasm dist/test-plugins/gadgets.wasm
	$(CARGO) build --target $(WASM_TARGET) --profile $(WASM_PROFILE) -p rekon-test-gadgets --features broken-rule
	cp $(WASM_OUT)/rekon_test_gadgets.wasm dist/test-plugins/gadgets-broken-rule.wasm
	$(CARGO) build --target $(WASM_TARGET) --profile $(WASM_PROFILE) -p rekon-test-gadgets --features broken-policy
	cp $(WASM_OUT)/rekon_test_gadgets.wasm dist/test-plugins/gadgets-broken-policy.wasm

# The TypeScript and Python SDKs, the seed ports written with them
# (plugins/test-fanout-ts, plugins/nodepool-py) and the widgets test plugin
# in both (tests/plugins/widgets-ts, widgets-py: admission). `npm ci` from
# the committed lock files; the Python SDK and componentize-py/pytest from
# pyproject.toml.
TS_PACKAGES := sdk/typescript plugins/test-fanout-ts tests/plugins/widgets-ts
PY_PACKAGES := sdk/python plugins/nodepool-py tests/plugins/widgets-py

sdk-deps:
	@for d in $(TS_PACKAGES); do \
	  [ -d $$d/node_modules ] && [ $$d/node_modules/.package-lock.json -nt $$d/package-lock.json ] || (cd $$d && npm ci --no-audit --no-fund) || exit 1; \
	done
	@python3 -c 'import rekon_sdk, componentize_py, pytest' 2>/dev/null || \
	  python3 -m pip install --quiet --disable-pip-version-check -e sdk/python[dev]

sdk-test: sdk-deps build
	@for d in $(TS_PACKAGES); do (cd $$d && REKON=$(abspath $(REKON_BIN)) npm test) || exit 1; done
	@for d in $(PY_PACKAGES); do (cd $$d && REKON=$(abspath $(REKON_BIN)) python3 -m pytest -q) || exit 1; done

# The ports' components -> dist/sdk-plugins/ (tests/e2e/tests/sdk_ports.rs
# replays the Rust seeds' recorded cases against them; tests/e2e/tests/
# admission.rs runs its kubectl cases against the widgets in each language).
sdk-plugins: sdk-deps
	@mkdir -p dist/sdk-plugins
	cd plugins/test-fanout-ts && npm run build
	cp plugins/test-fanout-ts/dist/test_fanout_ts.wasm dist/sdk-plugins/
	cd tests/plugins/widgets-ts && npm run build
	cp tests/plugins/widgets-ts/dist/widgets_ts.wasm dist/sdk-plugins/
	cd tests/plugins/widgets-ts && npm run build:conversion
	cp tests/plugins/widgets-ts/dist/widgets_ts_conversion.wasm dist/sdk-plugins/
	cd tests/plugins/widgets-ts && npm run build:policies
	cp tests/plugins/widgets-ts/dist/widgets_ts_policies.wasm dist/sdk-plugins/
	cd tests/plugins/widgets-ts && npm run build:strict
	cp tests/plugins/widgets-ts/dist/widgets_ts_strict.wasm dist/sdk-plugins/
	cd plugins/nodepool-py && rekon-py-build nodepool_py -o dist/nodepool_py.wasm
	cp plugins/nodepool-py/dist/nodepool_py.wasm dist/sdk-plugins/
	cd tests/plugins/widgets-py && rekon-py-build widgets_py -o dist/widgets_py.wasm
	cp tests/plugins/widgets-py/dist/widgets_py.wasm dist/sdk-plugins/
	cd tests/plugins/widgets-py && rekon-py-build widgets_py_conversion -o dist/widgets_py_conversion.wasm
	cp tests/plugins/widgets-py/dist/widgets_py_conversion.wasm dist/sdk-plugins/
	cd tests/plugins/widgets-py && rekon-py-build widgets_py_policies -o dist/widgets_py_policies.wasm
	cp tests/plugins/widgets-py/dist/widgets_py_policies.wasm dist/sdk-plugins/
	cd tests/plugins/widgets-py && rekon-py-build widgets_py_strict -o dist/widgets_py_strict.wasm
	cp tests/plugins/widgets-py/dist/widgets_py_strict.wasm dist/sdk-plugins/

# The e2e seed scenarios with the ports loaded in place of the Rust builds.
# The ports are compiled into the default compiled-plugin cache first (what
# every `rekon run` of the scenarios maps): compiling a JavaScript or Python
# component takes a debug build tens of seconds, each scenario would do it.
seed-scenarios-ports: sdk-plugins build
	@mkdir -p dist/ports-as-seeds
	cp dist/sdk-plugins/test_fanout_ts.wasm dist/ports-as-seeds/test_fanout.wasm
	cp dist/sdk-plugins/nodepool_py.wasm dist/ports-as-seeds/nodepool.wasm
	$(REKON_BIN) plugin compile dist/ports-as-seeds/test_fanout.wasm dist/ports-as-seeds/nodepool.wasm
	REKON_PLUGINS=$(abspath dist/ports-as-seeds) $(CARGO) test -p rekon-e2e --test seed_plugins

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Every test: doctests first (nextest does not run them), then every unit,
# integration and end-to-end test with nextest (parallel processes, one
# summary line at the end); plain `cargo test` where nextest is missing.
unit: plugins test-plugins sdk-plugins
	$(CARGO) build -p rekon-host -p kube-sim -p rekon-e2e
	$(CARGO) test --workspace --doc
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
	  $(CARGO) nextest run --workspace --no-fail-fast; \
	else \
	  $(CARGO) test --workspace --no-fail-fast; \
	fi

test: setup-test fmt-check clippy sdk-test unit seed-scenarios-ports

# Two embedded kube-sim clusters, `rekon run --install-crds` with dist/plugins,
# deploy/samples applied, every change narrated, then the live swap through a
# Plugin object pulled from a local OCI registry (Debian's docker-registry,
# installed by setup-demo), and the TypeScript and Python ports pushed there
# with precompiled code and signed, loaded from it without compiling. DEMO_EXIT_AFTER_CONVERGE=1 (or
# DEMO_ARGS=--exit-after-converge) exits 0 once all of it converged;
# DEMO_KEEP=1 keeps the work directory (kubeconfig, rekon.log).
demo: setup-demo plugins chaos-plugins sdk-plugins
	$(CARGO) build -p rekon-host -p kube-sim -p rekon-e2e
	./target/debug/rekon-demo $(DEMO_ARGS)

clean-dist:
	rm -rf dist
