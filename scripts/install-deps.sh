#!/usr/bin/env bash
# Installs what building uvmpool needs from Debian's packages (as root; a no-op when all are there).
# CUDA headers come from the toolkit at /usr/local/cuda; the driver itself is never needed to build.
set -euo pipefail
packages=(cmake make g++ python3 binutils libspdlog-dev libfmt-dev nlohmann-json3-dev
          libgtest-dev libgmock-dev libbenchmark-dev python3-matplotlib
          # uvmpool-stat --serve (cpp-httplib, found with pkg-config); its tests (curl, promtool)
          libcpp-httplib-dev pkgconf curl prometheus
          # the Python package: wheel built offline from Debian's setuptools, tested in a venv
          python3-venv python3-pip python3-setuptools python3-wheel
          # docs/deploy checks: manifests and dashboard
          yamllint python3-yaml
          # bounded fuzzing (scripts/fuzz.sh): clang and its libFuzzer runtime
          clang libclang-rt-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "uvmpool: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda.h" ]; then
  echo "uvmpool: the CUDA toolkit headers are missing (${CUDA_HOME:-/usr/local/cuda}/include/cuda.h);" \
       "install the CUDA toolkit or set CUDA_HOME" >&2
  exit 1
fi
