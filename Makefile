# Everything a newcomer needs: `make demo` and `make test` build .venv from uv.lock first.
PY ?= python3
UV_VERSION := 0.13.9
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
BIN := $(VENV)/bin
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)
# The wire core (rust/attest_wire, a uv workspace member) is built by maturin with cargo; its
# build cache stays out of the repository, shared by every checkout on the machine.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/attest-otel/cargo-target
WIRE_SRC := rust/attest_wire/pyproject.toml rust/attest_wire/Cargo.toml rust/attest_wire/Cargo.lock $(wildcard rust/attest_wire/src/*.rs rust/attest_wire/src/*/*.rs) rust/attest_wire/attest_otel_wire.pyi
# Bytecode at install time: this environment sets PYTHONDONTWRITEBYTECODE, so nothing caches later.
# The project itself is installed editable, which uv does not compile: `compileall` below does
# (a stale file is compiled again at import, as before; docs/measurements.md, "OTLP/JSON read
# by the wire core").
export UV_COMPILE_BYTECODE := 1

.PHONY: setup proto test test-deps rust-test go-test fuzz-short test-phoenix lint check demo bench fixtures clean collector

$(UV):
	$(PY) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(VENV)/.synced: uv.lock pyproject.toml hatch_build.py tools/gen_proto.py $(wildcard proto/attest_otel/v1/*.proto) $(WIRE_SRC) | $(UV)
	$(UV) sync --frozen --python $(PY)
	$(BIN)/python -m compileall -q attest_otel
	touch $@

setup: $(VENV)/.synced

proto: setup
	$(BIN)/python tools/gen_proto.py

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check --quiet .
	$(BIN)/mypy --strict attest_otel
	@out=$$($(BIN)/lint-imports --no-cache 2>&1) || { echo "$$out"; exit 1; }; echo "$$out" | tail -n 1
	cd rust/attest_wire && cargo fmt --check && cd fuzz && cargo fmt --check
	@test -z "$$(gofmt -l collector)" || { gofmt -l collector; echo "gofmt: the files above"; exit 1; }

# The real test peers: the Collector, Jaeger v2 and Prometheus 3 built from source into
# ~/.cache/attest-otel/peers (tools/build-peers.sh, kept between runs), Debian's chromium and
# postgresql installed when root. A missing one skips its tests, named in the last line of
# the run (a failure under CI=true).
test-deps:
	@bash tools/test-deps.sh

# pytest in two workers (pytest-xdist): most tests wait on servers they start, so two share
# the two cores better than one; each test starts its servers on free loopback ports.
test: setup lint test-deps rust-test go-test fuzz-short
	$(BIN)/pytest -q -n 2

# The wire core's own tests (Rust: the varint, the validator's and the cut's edge cases).
# Without `extension-module` (maturin turns it on) the test binary links libpython, as PyO3
# documents for `cargo test`.
rust-test:
	cd rust/attest_wire && cargo test --locked --quiet

# attest-otel's Collector connector (collector/attestroutingconnector), built against the
# tested Collector release; the real Collector runs it in tests/peers.
go-test:
	cd collector/attestroutingconnector && go vet ./... && go test -count=1 ./...

# The wire core against prost for a few seconds (tools/fuzz.sh; FUZZ_SECONDS for longer).
fuzz-short:
	@bash tools/fuzz.sh

# The Collector the shipped configs are written for (collector-config/builder-config.yaml):
# ocb v0.161.0 builds it into the peer cache and says where.
collector:
	@bash tools/build-peers.sh collector

# Phoenix is large and slow to start, so its live tests are a group of their own.
PHOENIX_VENV := tests/phoenix/.venv

$(PHOENIX_VENV)/.synced: tests/phoenix/requirements.txt | $(UV)
	$(UV) venv --allow-existing --python $(PY) $(PHOENIX_VENV)
	$(UV) pip install --python $(PHOENIX_VENV) -r tests/phoenix/requirements.txt
	touch $@

test-phoenix: setup $(PHOENIX_VENV)/.synced
	ATTEST_OTEL_PHOENIX=$(PHOENIX_VENV)/bin/phoenix $(BIN)/pytest -q tests/phoenix

# The demo needs the runtime only: its own environment without the development tools, and no
# bytecode compiled ahead (a first `make demo` is about installing, not the toolchain).
DEMO_VENV := .venv-demo

$(DEMO_VENV)/.synced: uv.lock pyproject.toml hatch_build.py tools/gen_proto.py $(wildcard proto/attest_otel/v1/*.proto) $(WIRE_SRC) | $(UV)
	UV_PROJECT_ENVIRONMENT=$(DEMO_VENV) UV_COMPILE_BYTECODE=0 $(UV) sync --frozen --no-dev --python $(PY)
	touch $@

demo: $(DEMO_VENV)/.synced
	@$(DEMO_VENV)/bin/python examples/demo.py
	@$(DEMO_VENV)/bin/python examples/sidecar_demo.py

# Benchmarks are not tests: each prints its table against baselines measured in the same run.
bench: setup
	$(BIN)/python bench/bench_grade.py
	$(BIN)/python bench/bench_stages.py
	$(BIN)/python bench/bench_sidecar.py

# agentevals (issue 12's peer) in a bench-only venv, never in .venv; once it exists,
# bench_grade.py's agentevals line reports the comparison too.
AGENTEVALS_VENV := bench/.venv-agentevals

$(AGENTEVALS_VENV)/.synced: bench/agentevals-requirements.txt | $(UV)
	$(UV) venv --allow-existing --python $(PY) $(AGENTEVALS_VENV)
	$(UV) pip install --python $(AGENTEVALS_VENV) -r bench/agentevals-requirements.txt
	touch $@

# Sustained load with small caps: every cap passed, the store pruned many times (4 minutes;
# docs/sizing.md). `make soak SOAK="--seconds 1200 --store-mib 512"` for a longer one.
.PHONY: soak
soak: setup
	$(BIN)/python bench/soak.py $(SOAK)

.PHONY: bench-agentevals
bench-agentevals: setup $(AGENTEVALS_VENV)/.synced
	$(BIN)/python bench/bench_agentevals.py

fixtures:
	tests/fixtures/gen/run.sh
	tests/fixtures/gen/vercel/run.sh

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(TOOLS) attest_otel/_proto .pytest_cache .mypy_cache .ruff_cache
