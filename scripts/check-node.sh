#!/usr/bin/env bash
# Fails with a clear message when node is missing or outside what the locked packages support:
# Node 20 from 20.19.4 (@platformatic/kafka), or 22.12 and newer (vite, under vitest; it skips 21).
set -euo pipefail
if ! command -v node >/dev/null; then
  echo "node is not installed: install Node.js 20.19.4+ or 22.12+ (Debian's nodejs package is older; see the README's requirements)" >&2
  exit 1
fi
have=$(node -p 'process.versions.node')
at_least() { [ "$(printf '%s\n%s\n' "$1" "$have" | sort -V | head -1)" = "$1" ]; }
major=${have%%.*}
if { [ "$major" = 20 ] && at_least 20.19.4; } || { [ "$major" -ge 22 ] && at_least 22.12.0; }; then
  echo "node $have"
  exit 0
fi
echo "node $have is not supported: labelflow's locked packages need Node.js 20.19.4+ (20.x) or 22.12+" >&2
exit 1
