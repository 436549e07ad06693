#!/usr/bin/env bash
# Runs every example once, each on throwaway servers of its own (redis-server, and for some
# redis-sentinel, redis-cli or openssl, which ensure-redis.sh installs), and fails on the
# first one that fails or runs over two minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --examples
for example in examples/*.rs; do
  name=$(basename "$example" .rs)
  echo "== example $name"
  timeout 120 cargo run --quiet --example "$name"
done
