#!/usr/bin/env bash
# Fails with a clear message when node is missing or older than package.json's engines (>= 20.19.4).
set -euo pipefail
need=20.19.4
if ! command -v node >/dev/null; then
  echo "node is not installed: install Node.js $need or newer (Debian's nodejs package is older; see the README's requirements)" >&2
  exit 1
fi
have=$(node -p 'process.versions.node')
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
  echo "node $have is too old: labelflow's locked packages need Node.js $need or newer" >&2
  exit 1
fi
echo "node $have"
