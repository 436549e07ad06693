#!/usr/bin/env bash
# Installs redis-server from the OS packages (Debian/Ubuntu) when it is not on PATH.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
echo "redis-server not found: installing it from the OS packages" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
# The package may start a system service; the library never uses it (tests and the demo run
# their own throwaway servers on free ports).
command -v redis-server >/dev/null
