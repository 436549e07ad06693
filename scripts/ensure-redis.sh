#!/usr/bin/env bash
# Installs from the OS packages (Debian/Ubuntu) what the demo and the tests run that is not on
# PATH: redis-server, redis-cli (the cluster tests form their clusters with it), redis-sentinel
# (the failover tests) and openssl (the TLS tests make their certificates with it).
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
echo "not found: ${missing[*]}: installing from the OS packages" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
# The packages may start system services; the library never uses them (tests and the demo
# run their own throwaway servers on free ports).
command -v redis-server >/dev/null
command -v redis-cli >/dev/null
command -v redis-sentinel >/dev/null
command -v openssl >/dev/null
