#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages hvd needs. Idempotent; prints nothing when all are present.
# As a non-root user it prints the exact apt-get line to run instead. With --check it only says
# what is missing (exit 1 when something is). Every name exists in Debian 12 and 13 alike.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git file
  openmpi-bin libopenmpi-dev
  catch2 libboost-dev libcli11-dev libfmt-dev nlohmann-json3-dev libssl-dev
  openssh-client openssh-server iproute2 procps psmisc util-linux
  clang-format clang-tidy
  valgrind
  clang libclang-rt-dev
  libtorch-dev
  python3 python3-dev python3-torch python3-torchvision python3-pytest python3-numpy python3-mpi4py pybind11-dev
  python3-setuptools
  libdlpack-dev
  slurm-wlm munge
  debootstrap
)
if [[ "${HVD_DEPS_MINIMAL:-0}" == 1 ]]; then
  PKGS=(build-essential cmake pkg-config openmpi-bin libopenmpi-dev catch2 libboost-dev
        libcli11-dev libfmt-dev nlohmann-json3-dev libssl-dev)
fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ "${1:-}" == --check ]]; then
  echo "hvd: missing Debian packages: ${missing[*]}" >&2
  exit 1
fi

line="apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "hvd: missing Debian packages. Run as root:" >&2
  echo "  apt-get update && $line" >&2
  exit 1
fi
echo "hvd: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/hvd-install-deps.log 2>&1 || {
  tail -30 /tmp/hvd-install-deps.log >&2; exit 1; }
