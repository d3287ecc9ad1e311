#!/usr/bin/env bash
# Add Debian 12's contrib and non-free components (Nsight Systems and Nsight Compute live there) and refresh the
# package lists. Idempotent.
set -euo pipefail
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
if ! grep -rqs "non-free" /etc/apt/sources.list /etc/apt/sources.list.d/ ; then
  $sudo tee /etc/apt/sources.list.d/debian-nonfree.sources >/dev/null <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
$sudo apt-get update -qq
