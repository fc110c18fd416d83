#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# hvd::elastic::TorchState commits across libtorch releases: hvd_saved_format (saved_format.cc)
# built on this host saves, the one built in a Debian 13 root loads (chroot), and back.
#
#   saved_format_cross_test.sh HOST_BIN D13_ROOT D13_BIN
#     HOST_BIN  hvd_saved_format built on this host (run here)
#     D13_ROOT  the Debian 13 root directory
#     D13_BIN   hvd_saved_format built in that root, as a path inside it (run by chroot)
# The commits pass through a fresh directory under D13_ROOT/tmp, removed at the end.
# Exit status: 0 both directions load bit for bit, 1 a direction failed, 2 usage or a missing
# binary, 77 (skip) when not root (chroot needs root).
set -u

if [ $# -ne 3 ]; then
  echo "usage: $0 HOST_BIN D13_ROOT D13_BIN" >&2
  exit 2
fi
host_bin=$1 root=${2%/} d13_bin=$3
if [ ! -x "$host_bin" ]; then
  echo "$0: no host binary $host_bin" >&2
  exit 2
fi
if [ ! -x "$root$d13_bin" ]; then
  echo "$0: no Debian 13 binary $d13_bin in $root" >&2
  exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "$0: skipped: chroot into $root needs root" >&2
  exit 77
fi

dir=$(mktemp -d "$root/tmp/hvd_saved_format.XXXXXX") || exit 2
trap 'rm -rf "$dir"' EXIT
inside=${dir#"$root"}  # the same directory as the chroot sees it

d13() {
  chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$d13_bin" "$@"
}

status=0
echo "== saved on this host, loaded in Debian 13"
if "$host_bin" save "$dir/host.commits" && d13 load "$inside/host.commits"; then
  echo "== host -> Debian 13: ok"
else
  echo "== host -> Debian 13: FAILED"
  status=1
fi
echo "== saved in Debian 13, loaded on this host"
if d13 save "$inside/d13.commits" && "$host_bin" load "$dir/d13.commits"; then
  echo "== Debian 13 -> host: ok"
else
  echo "== Debian 13 -> host: FAILED"
  status=1
fi
exit $status
