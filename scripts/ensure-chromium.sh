#!/usr/bin/env bash
# Makes sure a chromium is installed: the timeline page test (e2e/timeline-page.e2e.spec.ts) drives
# it with playwright-core, which downloads no browser of its own. Uses the first of CHROMIUM_PATH,
# Debian's /usr/bin/chromium, /usr/bin/chromium-browser and Ubuntu's snap (/snap/bin/chromium);
# installs Debian's package when none is there (as root, or through sudo). Prints the browser's
# version on stderr and its path on stdout, for `CHROMIUM_PATH=$(bash scripts/ensure-chromium.sh)`.
#   CHROMIUM_PATH  the browser to use
set -euo pipefail
if [ -n "${CHROMIUM_PATH:-}" ]; then
  if [ ! -x "$CHROMIUM_PATH" ]; then
    echo "CHROMIUM_PATH=$CHROMIUM_PATH is not an executable" >&2
    exit 1
  fi
  browser="$CHROMIUM_PATH"
else
  browser=""
  for candidate in /usr/bin/chromium /usr/bin/chromium-browser /snap/bin/chromium; do
    # Ubuntu's /usr/bin/chromium-browser may be a stub that only asks for the snap: a browser must answer --version.
    if [ -x "$candidate" ] && timeout 20 "$candidate" --version >/dev/null 2>&1; then browser="$candidate"; break; fi
  done
fi
if [ -z "$browser" ]; then
  as_root=()
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "chromium is missing and this user cannot install it: run 'apt-get install chromium' as root (Ubuntu: 'snap install chromium'), or set CHROMIUM_PATH" >&2
      exit 1
    fi
    as_root=(sudo)
  fi
  echo "installing Debian's chromium (apt-get)" >&2
  # Waits for the dpkg lock (a fresh VM's unattended-upgrades) and retries a failed download.
  apt_opts=(-o DPkg::Lock::Timeout=300 -o Acquire::Retries=3)
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" update -qq >&2
  if ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends chromium >/dev/null; then
    # Ubuntu has no chromium deb: its package is a snap.
    echo "apt-get could not install chromium (on Ubuntu: 'sudo snap install chromium'); or set CHROMIUM_PATH to a chromium or chrome binary" >&2
    exit 1
  fi
  browser=/usr/bin/chromium
fi
echo "chromium: $browser ($(timeout 20 "$browser" --version 2>/dev/null || echo 'version unknown'))" >&2
echo "$browser"
