#!/usr/bin/env bash
# Install Debian's Chromium (and ChromeDriver) for the browser tests (tests/test_views_browser.py).
# Idempotent: does nothing when /usr/bin/chromium already runs. Playwright drives this binary
# (executable_path="/usr/bin/chromium"); `playwright install` cannot download its own browser here.
set -euo pipefail
if [ -x /usr/bin/chromium ] && /usr/bin/chromium --headless --no-sandbox --version >/dev/null 2>&1; then
  echo "chromium already installed: $(/usr/bin/chromium --headless --no-sandbox --version 2>/dev/null)"
  exit 0
fi
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
echo "installed: $(/usr/bin/chromium --headless --no-sandbox --version 2>/dev/null)"
