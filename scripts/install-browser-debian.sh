#!/usr/bin/env bash
# Install Debian's Chromium for the browser tests: the headless shell (chromium-headless-shell, the browser
# Playwright itself uses for headless runs: a quarter less CPU per JupyterLab page than the full browser), the full
# browser (benchmarks/view.py's first-paint figures) and ChromeDriver. Idempotent: does nothing when both run.
# Playwright drives these binaries (executable_path); `playwright install` cannot download its own browser here.
set -euo pipefail
SHELL_BIN=/usr/lib/chromium/chromium-headless-shell
runs() { [ -x "$1" ] && "$1" --headless --no-sandbox --version >/dev/null 2>&1; }
if runs /usr/bin/chromium && runs "$SHELL_BIN"; then
  echo "chromium already installed: $("$SHELL_BIN" --headless --no-sandbox --version 2>/dev/null)"
  exit 0
fi
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-headless-shell chromium-driver >/dev/null
echo "installed: $("$SHELL_BIN" --headless --no-sandbox --version 2>/dev/null)"
