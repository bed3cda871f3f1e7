#!/usr/bin/env bash
# The real peers some tests run. `make test` calls this first.
#
# Built from source by tools/build-peers.sh into ~/.cache/attest-otel/peers (kept between
# runs; about 12 minutes on 2 cores on a fresh machine, seconds once built): the Collector
# of collector-config/builder-config.yaml, Jaeger v2 and Prometheus 3. Without Go, or when a
# build fails, their tests are skipped and named at the end (a failure under CI=true).
#
# Debian's programs: Chromium (renders `report --html`) and PostgreSQL (the fleet's shared
# store; the tests run initdb + pg_ctl as the package's unprivileged `postgres` user when
# root).
#
# As root, missing ones are installed with apt-get, as CI does. Otherwise nothing is
# installed: the line below says what is missing, and pytest skips the tests that need it
# (and names them again in one line at the end). With CI=true a missing program is an error,
# so a skip can never hide a failure in CI.
set -euo pipefail

# program:package pairs; the program is looked up on PATH, and PostgreSQL's server programs
# where Debian keeps them (/usr/lib/postgresql/VERSION/bin, not on PATH).
wanted=(chromium:chromium pg_ctl:postgresql)

have() {
  command -v "$1" >/dev/null 2>&1 && return 0
  [ "$1" = pg_ctl ] && compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null
}

peers_failed=0
bash "$(dirname "$0")/build-peers.sh" || peers_failed=1
if [ "$peers_failed" = 1 ] && [ "${CI:-}" = true ]; then
  echo "test-deps: a peer could not be built (CI=true: failing)" >&2
  exit 1
fi

missing=()
for pair in "${wanted[@]}"; do
  have "${pair%%:*}" || missing+=("${pair##*:}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "test-deps: installing ${missing[*]} with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Another apt-get on the machine holds the lock for a while: wait for it, not fail.
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  exit 0
fi

message="test-deps: missing ${missing[*]}: their tests will be skipped; install them with \`sudo apt-get install ${missing[*]}\`"
if [ "${CI:-}" = true ]; then
  echo "$message (CI=true: failing instead)" >&2
  exit 1
fi
echo "$message" >&2
