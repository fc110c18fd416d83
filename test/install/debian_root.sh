# SPDX-License-Identifier: Apache-2.0
# Sourced by the tests that run hvd in a debootstrapped Debian root (clean_host_test.sh, the
# [debian13] tier): the mirror this machine's apt uses, whether it answers, and a root's mounts
# and commands.

# The Debian mirror this machine's apt uses (deb822 or one-line sources), else deb.debian.org.
DEBIAN_MIRROR=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
                  /etc/apt/sources.list.d/*.list 2>/dev/null |
                grep -oE 'https?://[^ ]*/debian/?( |$)' | grep -v security | head -1 | tr -d ' ' || true)
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_MIRROR=${DEBIAN_MIRROR%/}

# debian_reachable SUITE: the mirror serves SUITE's Release file (15 s at most).
debian_reachable() {
  local host path
  host=$(sed -E 's|^https?://([^/:]+).*|\1|' <<<"$DEBIAN_MIRROR")
  path=$(sed -E 's|^https?://[^/]+||' <<<"$DEBIAN_MIRROR")
  timeout 15 bash -c "exec 3<>/dev/tcp/$host/80 && printf 'HEAD $path/dists/$1/Release HTTP/1.1\r\nHost: $host\r\nConnection: close\r\n\r\n' >&3 && head -1 <&3" \
    2>/dev/null | grep -q '^HTTP/'
}

# debian_root_mount ROOT: /proc, /sys (read-only: hwloc reads the CPU topology there), /dev,
# /dev/pts and a private tmpfs /dev/shm; the host's resolv.conf and hosts.
debian_root_mount() {
  local root=$1
  mkdir -p "$root/proc" "$root/sys" "$root/dev" "$root/dev/shm"
  mount -t proc proc "$root/proc"
  mount -t sysfs -o ro sysfs "$root/sys"
  mount --bind /dev "$root/dev"
  mount --bind /dev/pts "$root/dev/pts"
  mount -t tmpfs -o size=1g tmpfs "$root/dev/shm"
  cp /etc/resolv.conf /etc/hosts "$root/etc/"
}

# debian_root_unmount ROOT: everything mounted at or below ROOT, innermost first.
debian_root_unmount() {
  local root m
  root=$(realpath -m "$1")
  awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

# debian_root_run ROOT [VAR=value ...] COMMAND...: COMMAND inside ROOT as root, with a clean
# environment (and Open MPI's consent to run as root, for the tests' mpirun).
debian_root_run() {
  local root=$1
  shift
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$@"
}
