#!/usr/bin/env bash
# Node.js 18+ for building the JupyterLab extension (labextension/) when the package is installed from source.
# Idempotent: does nothing when a node of version 18 or newer is on PATH; otherwise Debian's nodejs (18 on bookworm).
set -euo pipefail
if command -v node >/dev/null 2>&1 && [ "$(node -p 'process.versions.node.split(".")[0]')" -ge 18 ]; then
  echo "node already installed: $(node --version)"
  exit 0
fi
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nodejs >/dev/null
echo "installed: node $(node --version)"
