#!/usr/bin/env bash
# The whole test suite: unit, integration (against throwaway redis-server processes) and doc
# tests. Installs redis-server first when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
cargo test --lib --tests --examples
cargo test --doc
# The operator tool, behind its feature, and its tests that run it as a process.
cargo test --features inspect --bin redlease-inspect --test inspect
