#!/usr/bin/env bash
# The demo: worker threads sharing a counter under redlease locks.
# Usage: scripts/demo.sh [redis-url]   (without a URL it runs on a throwaway local redis-server)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
cargo run --quiet --release --example workers -- "$@"
