#!/bin/sh
# deploy/install.sh PREFIX: installs attest-otel and its locked dependencies (uv.lock, no dev
# group) into a new venv at PREFIX, from the source tree it is run in. The sidecar image's
# only install step (deploy/Dockerfile); tests/test_deploy.py runs it in a plain venv, since
# no container runtime runs where the tests do.
set -eu
prefix="$1"
tools="$(mktemp -d)"
trap 'rm -rf "$tools"' EXIT
# The wire core is compiled by cargo (maturin): its build cache outside the tree, as `make`.
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${HOME:-/tmp}/.cache/attest-otel/cargo-target}"
export CARGO_TARGET_DIR
python3 -m venv "$tools"
"$tools/bin/pip" install --quiet --disable-pip-version-check uv==0.13.9
UV_PROJECT_ENVIRONMENT="$prefix" UV_PYTHON_DOWNLOADS=never UV_COMPILE_BYTECODE=1 \
  "$tools/bin/uv" sync --frozen --no-dev --no-editable --python python3 --quiet
"$prefix/bin/attest-otel" --version
