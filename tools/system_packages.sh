#!/usr/bin/env bash
# Make sure the Debian packages in requirements/apt.txt are installed: installs the missing ones
# when it can (as root, or with sudo that asks no password), otherwise stops with one line that
# gives the exact command. `make book`, `make test` and .ci/run call it.
#
#   tools/system_packages.sh          check, and install what is missing
#   tools/system_packages.sh --list   print the package names
# Exit status: 0 all present (or installed), 1 missing and not installable here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t wanted < <(sed -e 's/#.*//' "$here/../requirements/apt.txt" | tr -s ' \t' '\n' | sed '/^$/d')

if [ "${1:-}" = --list ]; then printf '%s\n' "${wanted[@]}"; exit 0; fi

if ! command -v dpkg-query >/dev/null; then
  echo "system_packages.sh: warning: not a Debian system, cannot check; the book needs: ${wanted[*]}" >&2
  exit 0
fi
installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${wanted[@]}" 2>/dev/null || true)
missing=()
for p in "${wanted[@]}"; do
  grep -qx "$p installed" <<<"$installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ]; then sudo=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo=(sudo -n)
else
  echo "system_packages.sh: error: missing system packages; install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "system_packages.sh: installing ${missing[*]}" >&2
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
