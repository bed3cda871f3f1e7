#!/usr/bin/env bash
# Builds the test peers from source into a cache outside the repository, kept between runs:
#   the Collector of collector-config/builder-config.yaml (ocb v0.161.0),
#   Jaeger v2 v1.75.0 (through the Go module in tools/peers/jaeger),
#   Prometheus 3 v0.316.0 (3.x; its OTLP receiver keeps the grade metrics' exemplars).
# A peer already in the cache is not rebuilt; delete its file to rebuild it. On a fresh
# machine all three take about 12 minutes on 2 cores (docs/peers.md has the measured times).
# Prints where each one is; exits non-zero when one cannot be built.
#
#   tools/build-peers.sh [collector|jaeger|prometheus ...]   (default: all three)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${ATTEST_OTEL_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/attest-otel/peers}
mkdir -p "$cache"
export GOBIN="$cache/gobin"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

OCB_VERSION=v0.161.0
JAEGER_VERSION=v1.75.0
PROMETHEUS_VERSION=v0.316.0

command -v go >/dev/null 2>&1 || { echo "build-peers: go is not on PATH (the peers build from source with Go)" >&2; exit 2; }

say() { echo "build-peers: $*" >&2; }

build_collector() {
  local out="$cache/otelcol-attest"
  # The manifest's output_path points into the repo for the builder run by hand; the cache
  # copy is the same manifest with its output path replaced. A changed manifest rebuilds.
  # The connector of our own is built from the repo: its path made absolute, and its
  # sources' digest kept with the manifest, so a change to them rebuilds too.
  local manifest
  manifest=$(sed -e "s|^  output_path: .*|  output_path: $out|" \
    -e "s|^    path: \./|    path: $repo/|" "$repo/collector-config/builder-config.yaml")
  manifest+=$'\n'"# sources: $(cd "$repo/collector" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) ! -name '*_test.go' | sort | xargs sha256sum | sha256sum | cut -c1-16)"
  if [ -x "$out/otelcol-attest" ] && [ "$manifest" = "$(cat "$cache/builder-config.yaml" 2>/dev/null)" ]; then
    return 0
  fi
  say "building the Collector (ocb $OCB_VERSION, collector-config/builder-config.yaml): ~3 min on 2 cores"
  go install "go.opentelemetry.io/collector/cmd/builder@$OCB_VERSION"
  rm -rf "$out"
  printf '%s\n' "$manifest" >"$cache/builder-config.yaml"
  "$GOBIN/builder" --config "$cache/builder-config.yaml" >"$cache/collector-build.log" 2>&1 ||
    { tail -n 30 "$cache/collector-build.log" >&2; return 1; }
}

# A peer built at another version than the one named above is rebuilt: its version is kept
# beside it, so a bump here reaches every machine's cache.
current() { [ -x "$cache/$1" ] && [ "$(cat "$cache/$1.version" 2>/dev/null)" = "$2" ]; }

build_jaeger() {
  local out="$cache/jaeger"
  current jaeger "$JAEGER_VERSION" && return 0
  say "building Jaeger v2 $JAEGER_VERSION (tools/peers/jaeger): ~4 min on 2 cores"
  local work="$cache/jaeger-module"
  mkdir -p "$work"
  cp "$repo/tools/peers/jaeger/go.mod" "$work/go.mod"
  [ -f "$repo/tools/peers/jaeger/go.sum" ] && cp "$repo/tools/peers/jaeger/go.sum" "$work/go.sum"
  (cd "$work" && go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION" &&
    go build -o "$out" github.com/jaegertracing/jaeger/cmd/jaeger) >"$cache/jaeger-build.log" 2>&1 ||
    { tail -n 30 "$cache/jaeger-build.log" >&2; return 1; }
  echo "$JAEGER_VERSION" >"$out.version"
}

build_prometheus() {
  local out="$cache/prometheus"
  current prometheus "$PROMETHEUS_VERSION" && return 0
  say "building Prometheus 3 ($PROMETHEUS_VERSION): ~5 min on 2 cores"
  go install "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION" >"$cache/prometheus-build.log" 2>&1 ||
    { tail -n 30 "$cache/prometheus-build.log" >&2; return 1; }
  cp "$GOBIN/prometheus" "$out"
  echo "$PROMETHEUS_VERSION" >"$out.version"
}

peers=("$@")
[ ${#peers[@]} -eq 0 ] && peers=(collector jaeger prometheus)
failed=()
for peer in "${peers[@]}"; do
  start=$SECONDS
  if "build_$peer"; then
    [ $((SECONDS - start)) -gt 1 ] && say "$peer built in $((SECONDS - start)) s"
  else
    failed+=("$peer")
  fi
done
say "peers in $cache: otelcol-attest/otelcol-attest jaeger prometheus"
if [ ${#failed[@]} -gt 0 ]; then
  say "could not build: ${failed[*]} (logs in $cache/*-build.log)"
  exit 1
fi
