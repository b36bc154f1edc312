#!/usr/bin/env bash
# Installs everything strata needs to build and test on Debian 12 (apt-get only).
# Safe to run repeatedly; skips apt when every package is already present.
set -euo pipefail
pkgs=(build-essential meson ninja-build pkg-config clang libclang-rt-14-dev
      liblua5.4-dev libyaml-dev liburing-dev libhwloc-dev libxxhash-dev
      zlib1g-dev libzstd-dev libopenblas-dev libxsmm-dev libcmocka-dev hwloc-nox gzip zstd
      libucx-dev ucx-utils openmpi-bin libopenmpi-dev libmicrohttpd-dev curl util-linux
      chromium fonts-dejavu-core)  # chromium: tests/e2e/report.sh renders the report headless
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi
