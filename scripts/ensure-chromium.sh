#!/usr/bin/env bash
# Makes sure Debian's chromium is installed: the timeline page test (e2e/timeline-page.e2e.spec.ts)
# drives it with playwright-core, which downloads no browser of its own. Installs the distribution
# package when missing (as root, or through sudo); prints the browser's path and version.
#   CHROMIUM_PATH  the browser to use (default /usr/bin/chromium)
set -euo pipefail
browser="${CHROMIUM_PATH:-/usr/bin/chromium}"
if [ ! -x "$browser" ]; then
  if [ "${CHROMIUM_PATH:-}" != "" ]; then
    echo "CHROMIUM_PATH=$browser is not an executable" >&2
    exit 1
  fi
  as_root=()
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "chromium is missing and this user cannot install it: run 'apt-get install chromium' as root" >&2
      exit 1
    fi
    as_root=(sudo)
  fi
  echo "installing Debian's chromium (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
echo "chromium: $browser ($("$browser" --version 2>/dev/null || echo 'version unknown'))"
