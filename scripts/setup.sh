#!/usr/bin/env bash
# Installs what `make demo` or `make test` needs and a fresh machine lacks.
#
#   scripts/setup.sh demo   the wasm target and a local OCI registry (the
#                           demo's live swap through a Plugin object)
#   scripts/setup.sh test   the above, plus everything the gates and the
#                           tests run (see the list below)
#
# Each missing piece gets one line saying what is installed and why; what is
# present is left alone, so a prepared machine pays a few `command -v` checks.
# Debian packages come in one `apt-get install` after one `apt-get update`,
# and only when one is missing; `sudo` is used when not running as root.
# `make demo` and `make test` call this first: the README's two commands are
# the whole set-up, on a developer's machine and in CI alike.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-test}"
case "$mode" in
  demo | test) ;;
  *)
    echo "usage: scripts/setup.sh demo|test" >&2
    exit 2
    ;;
esac

say() { echo "setup: $*"; }

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  fi
fi

# --- Rust: the plugins' target, and the gates' components -------------------
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  say "installing the Rust target wasm32-wasip2 (every plugin is built for it)"
  rustup target add wasm32-wasip2
fi
if [ "$mode" = test ]; then
  for component in clippy rustfmt; do
    if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
      say "installing the Rust component $component (make test's gates)"
      rustup component add "$component"
    fi
  done
  if ! cargo nextest --version >/dev/null 2>&1; then
    say "installing cargo-nextest (make test runs every test with it)"
    cargo install cargo-nextest --locked
  fi
fi

# --- Debian packages ---------------------------------------------------------
packages=()
want() { # want PACKAGE WHY
  say "will install Debian's $1: $2"
  packages+=("$1")
}
command -v docker-registry >/dev/null 2>&1 ||
  want docker-registry "a real OCI registry on loopback (Plugin objects pulled from a registry)"
if [ "$mode" = test ]; then
  command -v skopeo >/dev/null 2>&1 ||
    want skopeo "an independent OCI client the registry tests check rekon's pushes with"
  if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    want prometheus "a real Prometheus and promtool (the monitoring tests and alert rules)"
  fi
  if ! command -v npm >/dev/null 2>&1; then
    want nodejs "node, for the TypeScript SDK, its port and scaffold"
    want npm "npm, for the TypeScript SDK's packages"
  fi
  command -v chromium >/dev/null 2>&1 ||
    want chromium "a real headless browser (the explorer's HTML report is checked as rendered)"
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 ||
    want python3-venv "Python's venv, for the Python scaffold's test"
fi
if [ "${#packages[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] && [ -z "$sudo" ]; then
    echo "setup: need root or sudo to install ${packages[*]}" >&2
    exit 1
  fi
  started=$SECONDS
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${packages[@]}"
  say "Debian packages installed in $((SECONDS - started)) s"
fi

[ "$mode" = test ] || exit 0

# --- Python: the SDK, its build tool and test runner, the official client ----
pip_install() {
  python3 -m pip install --quiet --disable-pip-version-check "$@"
}
# The SDK must be this checkout's (an editable install of another clone
# would test that clone's SDK).
if ! python3 -c 'import os, sys, componentize_py, pytest, rekon_sdk
sys.exit(0 if os.path.realpath(rekon_sdk.__file__).startswith(os.path.realpath("sdk/python") + os.sep) else 1)' >/dev/null 2>&1; then
  say "installing this checkout's Python SDK (editable) with componentize-py and pytest (the Python SDK, its port and scaffold)"
  pip_install -e 'sdk/python[dev]'
fi
if ! python3 -c 'import kubernetes' >/dev/null 2>&1; then
  say "installing the official Kubernetes Python client (kube-sim is checked with it)"
  pip_install kubernetes
fi
if ! python3 -c 'import cryptography' >/dev/null 2>&1; then
  say "installing Python's cryptography (the independent side of the plugin signature tests)"
  pip_install cryptography
fi

# --- npm: the TypeScript SDK and its port, from the committed lock files ------
for d in sdk/typescript plugins/test-fanout-ts; do
  if [ ! -f "$d/node_modules/.package-lock.json" ] || [ "$d/package-lock.json" -nt "$d/node_modules/.package-lock.json" ]; then
    say "installing $d's npm packages from its package-lock.json (npm ci)"
    (cd "$d" && npm ci --no-audit --no-fund)
  fi
done
