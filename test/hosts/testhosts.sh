#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# testhosts.sh - fake multi-host cluster on one Linux machine, for hvdrun's [hosts] tests.
#
# Each fake host is a network namespace (<prefix>1..N) plugged into one
# bridge in the root namespace (the "master"), with its own IP, its own UTS
# hostname (sshd runs under `unshare --uts`, so everything started over ssh
# sees `hostname` == the fake host name) and its own sshd (key-only root
# login).  Optionally (HVD_TESTHOSTS_PRIVATE_TMP=1) each fake host also gets
# private tmpfs mounts on /tmp and /dev/shm, like separate machines.
#
# Usage (as root):
#   testhosts.sh check          exit 0 if fake hosts can be made here, else say why, exit 77
#   testhosts.sh up N           create N fake hosts and start their sshds (an existing rig
#                               of this prefix is torn down first, so `up` is idempotent)
#   testhosts.sh down           stop everything and remove all traces (idempotent)
#   testhosts.sh forget-hostkey H   drop H from known_hosts (unknown-host-key tests)
#   testhosts.sh learn-hostkeys     rebuild known_hosts from every fake host's key
#   testhosts.sh master-only-dir    print a directory only the master sees (each fake host
#                               has an empty tmpfs mounted over it: missing-program tests)
#   testhosts.sh status         show hosts, sshd pids, ssh reachability
#   testhosts.sh env            print shell exports for tests (hosts, ssh config, MCA vars)
#   testhosts.sh sshd-stop H    stop the sshd of fake host H (failure tests)
#   testhosts.sh sshd-start H   (re)start the sshd of fake host H
#   testhosts.sh exec H CMD...  run CMD "on" fake host H without ssh (nsenter)
#
# Knobs (environment):
#   HVD_TESTHOSTS_PREFIX       host/namespace name prefix     (default hvdrt)
#   HVD_TESTHOSTS_SUBNET       first 3 octets of a /24        (default 10.201.5)
#                              master = .1, host i = .(10+i)
#   HVD_TESTHOSTS_DIR          state dir (keys, configs, logs) (default /run/<prefix>-testhosts)
#                              must not be under /tmp when PRIVATE_TMP=1
#   HVD_TESTHOSTS_PRIVATE_TMP  1 = private /tmp and /dev/shm per fake host, shm = private
#                              /dev/shm only (a build under /tmp stays visible) (default 0)
#   HVD_TESTHOSTS_ETC          1 = add /etc/hosts entries + /etc/ssh/ssh_config.d
#                              drop-in so plain `ssh hvdhost1` works (default 1)
#   HVD_TESTHOSTS_UTS          0 = do NOT give fake hosts their own hostname (all
#                              share the master's; only to reproduce that pitfall)
# A second rig on the same machine needs its own PREFIX and SUBNET.
#
# Things it touches outside its state dir (all removed by `down`):
#   netns <prefix>1..N, bridge <prefix>br0, veths <prefix>v1..N,
#   a marked block in /etc/hosts, /etc/ssh/ssh_config.d/<prefix>-testhosts.conf,
#   /run/sshd (only if it did not exist before).
set -euo pipefail

PREFIX=${HVD_TESTHOSTS_PREFIX:-hvdrt}
SUBNET=${HVD_TESTHOSTS_SUBNET:-10.201.5}
STATE=${HVD_TESTHOSTS_DIR:-/run/${PREFIX}-testhosts}
PRIVATE_TMP=${HVD_TESTHOSTS_PRIVATE_TMP:-0}
USE_ETC=${HVD_TESTHOSTS_ETC:-1}
UTS=${HVD_TESTHOSTS_UTS:-1}

# interface names (<prefix>br0, <prefix>v<N>) must fit in 15 characters
[[ "$PREFIX" =~ ^[a-z][a-z0-9]{0,9}$ ]] || { echo "testhosts: bad HVD_TESTHOSTS_PREFIX '$PREFIX' (1-10 chars, [a-z][a-z0-9]*)" >&2; exit 1; }
[[ "$SUBNET" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || { echo "testhosts: bad HVD_TESTHOSTS_SUBNET '$SUBNET' (want e.g. 10.200.77)" >&2; exit 1; }
# options chosen at `up` time stick for later subcommands (sshd-start, env, ...)
if [ "${1:-}" != up ] && [ -f "$STATE/opts" ]; then
    # shellcheck disable=SC1091
    . "$STATE/opts"
fi

BR=${PREFIX}br0
MASTER_IP=${SUBNET}.1
CIDR=${SUBNET}.0/24
MARK_BEGIN="# BEGIN ${PREFIX} testhosts (testhosts.sh; removed by 'down')"
MARK_END="# END ${PREFIX} testhosts"
DROPIN=/etc/ssh/ssh_config.d/${PREFIX}-testhosts.conf
SSHD=/usr/sbin/sshd

die() { echo "testhosts: $*" >&2; exit 1; }
log() { echo "testhosts: $*" >&2; }

host_ip() { echo "${SUBNET}.$((10 + $1))"; }

# Fake hosts present right now (namespaces named <prefix><number>).
list_ns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+\$" | sort -V || true; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

check_tools() {
    local t
    for t in ip unshare nsenter ssh ssh-keygen "$SSHD" awk mountpoint; do
        command -v "$t" >/dev/null 2>&1 || die "missing tool: $t"
    done
}

# ---------------------------------------------------------------- /etc edits
# Rewrite /etc/hosts in place (cat >, not mv: /etc/hosts may be a bind mount).
etc_hosts_remove() {
    [ -f /etc/hosts ] || return 0
    grep -qF "$MARK_BEGIN" /etc/hosts || return 0
    local tmp; tmp=$(mktemp)
    awk -v b="$MARK_BEGIN" -v e="$MARK_END" '
        $0 == b {skip=1; next}
        skip && $0 == e {skip=0; next}
        !skip {print}' /etc/hosts >"$tmp"
    cat "$tmp" >/etc/hosts
    rm -f "$tmp"
}

etc_hosts_add() { # N
    local n=$1 i
    etc_hosts_remove
    {
        echo "$MARK_BEGIN"
        echo "${MASTER_IP} ${PREFIX}master"
        for i in $(seq 1 "$n"); do echo "$(host_ip "$i") ${PREFIX}${i}"; done
        echo "$MARK_END"
    } >>/etc/hosts
}

# ssh client config for the fake hosts (written to $STATE/ssh_config, usable
# with `ssh -F`, and - if USE_ETC - as a drop-in so plain `ssh hvdhost1` works).
write_ssh_config() { # N file
    local n=$1 f=$2 i names=""
    for i in $(seq 1 "$n"); do names+=" ${PREFIX}${i} $(host_ip "$i")"; done
    cat >"$f" <<EOF
# fake test hosts made by testhosts.sh (removed by 'testhosts.sh down')
Host${names}
    User root
    IdentityFile ${STATE}/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile ${STATE}/known_hosts
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    CheckHostIP no
    BatchMode yes
    ConnectTimeout 5
    # the default post-quantum kex costs ~0.3 s of CPU per connection here
    KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org
    LogLevel ERROR
EOF
    if [ "$USE_ETC" != 1 ]; then
        # no /etc/hosts entries: let ssh map names to addresses itself
        for i in $(seq 1 "$n"); do
            printf 'Host %s\n    HostName %s\n' "${PREFIX}${i}" "$(host_ip "$i")" >>"$f"
        done
    fi
}

# ------------------------------------------------------------------- sshd
sshd_pid() { # host -> pid of its (listening) sshd, or nothing
    local f="$STATE/$1/sshd.pid" p
    [ -f "$f" ] || return 0
    p=$(cat "$f" 2>/dev/null || true)
    # -ef compares the files, not the paths: /proc/PID/exe of a process in another mount
    # namespace reads as the path outside a chroot (/var/tmp/root/usr/sbin/sshd)
    [ -n "$p" ] && [ -d "/proc/$p" ] && [ "/proc/$p/exe" -ef "$SSHD" ] && echo "$p"
    return 0
}

wait_port() { # ip port timeout_s
    local ip=$1 port=$2 t=$3 end
    end=$(( $(date +%s%N) / 1000000 + t * 1000 ))
    while :; do
        if (exec 3<>"/dev/tcp/$ip/$port") 2>/dev/null; then return 0; fi
        [ $(( $(date +%s%N) / 1000000 )) -lt "$end" ] || return 1
        sleep 0.02
    done
}

start_sshd() { # host
    local h=$1 d="$STATE/$1" ip
    ip=$(awk '/^ListenAddress/ {print $2}' "$d/sshd_config")
    [ -z "$(sshd_pid "$h")" ] || { log "sshd on $h already running"; return 0; }
    rm -f "$d/sshd.pid"
    # ip netns exec  -> network namespace (+ a private mount ns, /sys remounted)
    # unshare --uts  -> own hostname, inherited by every ssh session
    # unshare --mount (optional) -> private /tmp and /dev/shm
    # Every fake host gets its own mount namespace with an empty tmpfs over
    # $STATE/master-only: files put there exist on the master only.
    local uts="--uts" mnt="--mount --propagation private"
    local setup="hostname \"\$1\"; mount -t tmpfs -o mode=755 tmpfs \"\$5\""
    if [ "$UTS" != 1 ]; then uts=""; setup="mount -t tmpfs -o mode=755 tmpfs \"\$5\""; fi
    if [ "$PRIVATE_TMP" = 1 ]; then
        setup="$setup; mount -t tmpfs -o mode=1777 tmpfs /tmp; mount -t tmpfs -o mode=1777 tmpfs /dev/shm"
    elif [ "$PRIVATE_TMP" = shm ]; then
        setup="$setup; mount -t tmpfs -o mode=1777 tmpfs /dev/shm"
    fi
    # sshd daemonizes; its PidFile tells us the daemon's pid.
    # shellcheck disable=SC2086
    ip netns exec "$h" unshare $uts $mnt -- /bin/sh -c \
        "$setup; exec \"\$2\" -f \"\$3\" -E \"\$4\"" sh "$h" "$SSHD" "$d/sshd_config" "$d/sshd.log" \
        "$STATE/master-only"
    wait_port "$ip" 22 10 || die "sshd on $h ($ip) did not come up; see $d/sshd.log"
    local i
    for i in $(seq 1 100); do [ -n "$(sshd_pid "$h")" ] && break; sleep 0.02; done
    [ -n "$(sshd_pid "$h")" ] || die "sshd on $h: no pid file"
}

stop_sshd() { # host
    local h=$1 p
    p=$(sshd_pid "$h")
    [ -n "$p" ] || { log "sshd on $h not running"; return 0; }
    kill -TERM "$p" 2>/dev/null || true
    local i
    for i in $(seq 1 100); do [ -d "/proc/$p" ] || break; sleep 0.02; done
    [ -d "/proc/$p" ] && kill -KILL "$p" 2>/dev/null || true
    rm -f "$STATE/$h/sshd.pid"
}

# Kill every process inside our namespace (sshd, its sessions, stray orted /
# ranks), by pid.
kill_ns_procs() { # ns
    local ns=$1 pids i
    for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25; do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -n "$pids" ] || return 0
        if [ "$i" -le 20 ]; then
            # shellcheck disable=SC2086
            kill -TERM $pids 2>/dev/null || true
        else
            # shellcheck disable=SC2086
            kill -KILL $pids 2>/dev/null || true
        fi
        sleep 0.05
    done
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] || log "warning: processes left in $ns: $pids"
}

# ------------------------------------------------------------------- up/down
cmd_up() {
    local n=${1:-}
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "usage: $0 up N   (1 <= N <= 200)"
    need_root; check_tools
    if [ -n "$(list_ns)" ] || [ -e "$STATE" ] || ip link show "$BR" >/dev/null 2>&1; then
        log "an earlier ${PREFIX} rig exists; tearing it down first"
        cmd_down
    fi
    [ ! -e "$STATE" ] || die "state dir $STATE exists; run '$0 down' first"
    ! ip link show "$BR" >/dev/null 2>&1 || die "bridge $BR exists; run '$0 down' first"
    ! ip -4 -o addr show | grep -qF " ${SUBNET}." || die "subnet ${CIDR} already in use here; set HVD_TESTHOSTS_SUBNET"
    if [ "$PRIVATE_TMP" = 1 ]; then
        case "$STATE/" in /tmp/*|/dev/shm/*) die "HVD_TESTHOSTS_DIR must not be under /tmp or /dev/shm with PRIVATE_TMP=1";; esac
    elif [ "$PRIVATE_TMP" = shm ]; then
        case "$STATE/" in /dev/shm/*) die "HVD_TESTHOSTS_DIR must not be under /dev/shm with PRIVATE_TMP=shm";; esac
    fi

    local t0; t0=$(date +%s%N)
    UP_OK=0
    trap 'if [ "$UP_OK" != 1 ]; then log "up failed; cleaning up"; cmd_down >/dev/null 2>&1 || true; fi' EXIT

    mkdir -p "$STATE/master-only"; chmod 700 "$STATE"; chmod 755 "$STATE/master-only"
    echo "$n" >"$STATE/nhosts"
    printf 'UTS=%s\nPRIVATE_TMP=%s\nUSE_ETC=%s\n' "$UTS" "$PRIVATE_TMP" "$USE_ETC" >"$STATE/opts"
    # Debian's sshd refuses to start without its privilege separation dir.
    if [ ! -d /run/sshd ]; then mkdir -p /run/sshd; chmod 755 /run/sshd; touch "$STATE/created_run_sshd"; fi

    ssh-keygen -q -t ed25519 -N '' -C "${PREFIX}-testhosts-client" -f "$STATE/id_ed25519"
    cp "$STATE/id_ed25519.pub" "$STATE/authorized_keys"
    : >"$STATE/known_hosts"

    # the master side: one bridge with the master's address
    ip link add "$BR" type bridge
    ip addr add "${MASTER_IP}/24" dev "$BR"
    ip link set "$BR" up

    local i h ip d want
    for i in $(seq 1 "$n"); do
        h=${PREFIX}${i}; ip=$(host_ip "$i"); d="$STATE/$h"
        mkdir -p "$d"
        ip netns add "$h"
        ip link add "${PREFIX}v${i}" type veth peer name eth0 netns "$h"
        ip link set "${PREFIX}v${i}" master "$BR" up
        ip -n "$h" link set lo up
        ip -n "$h" addr add "${ip}/24" dev eth0
        ip -n "$h" link set eth0 up
        # (no default route: fake hosts can reach only the master and each other)

        ssh-keygen -q -t ed25519 -N '' -C "$h" -f "$d/ssh_host_ed25519_key"
        echo "${h},${ip} $(cut -d' ' -f1,2 "$d/ssh_host_ed25519_key.pub")" >>"$STATE/known_hosts"
        cat >"$d/sshd_config" <<EOF
# sshd for fake host $h (testhosts.sh)
Port 22
ListenAddress $ip
AddressFamily inet
HostKey $d/ssh_host_ed25519_key
PidFile $d/sshd.pid
AuthorizedKeysFile $STATE/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding yes
MaxStartups 256
MaxSessions 256
LogLevel INFO
EOF
    done

    write_ssh_config "$n" "$STATE/ssh_config"
    if [ "$USE_ETC" = 1 ]; then
        etc_hosts_add "$n"
        mkdir -p /etc/ssh/ssh_config.d
        cp "$STATE/ssh_config" "$DROPIN"
    fi

    for i in $(seq 1 "$n"); do start_sshd "${PREFIX}${i}"; done

    # end-to-end check: key auth, known_hosts, per-host hostname
    local pids=() rc=0
    for i in $(seq 1 "$n"); do
        h=${PREFIX}${i}
        if [ "$UTS" = 1 ]; then want=$h; else want=$(hostname); fi
        ( got=$(ssh -F "$STATE/ssh_config" "$h" hostname) && [ "$got" = "$want" ] ||
            { echo "testhosts: ssh $h hostname -> '${got:-}' (expected $want)" >&2; exit 1; } ) &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    [ "$rc" = 0 ] || die "ssh check failed"
    UP_OK=1
    log "up: $n fake hosts (${PREFIX}1..${PREFIX}${n}, $(host_ip 1)..$(host_ip "$n"), master ${MASTER_IP}) in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}

cmd_down() {
    need_root
    local t0 ns i; t0=$(date +%s%N)
    for ns in $(list_ns); do
        kill_ns_procs "$ns"
        # delete the veth pair explicitly: a pair that is only destroyed along
        # with its netns disappears asynchronously, and an immediate `up`
        # would then fail with "File exists".
        ip link del "${PREFIX}v${ns#"$PREFIX"}" 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || log "warning: could not delete netns $ns"
    done
    for i in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^${PREFIX}v[0-9]+\$" || true); do
        ip link del "$i" 2>/dev/null || true
    done
    ip link show "$BR" >/dev/null 2>&1 && ip link del "$BR"
    etc_hosts_remove
    rm -f "$DROPIN"
    # Open MPI names per-node files after the node's hostname; fake hosts that
    # were SIGKILLed (crash tests) leave them in the shared /tmp and /dev/shm
    # (Open MPI 4: ompi.H.UID, vader_segment.H.*; Open MPI 5: prted.H.PID.UID,
    # sm_segment.H.*).
    local f
    for f in /tmp/ompi."${PREFIX}"* /tmp/prte*."${PREFIX}"* /dev/shm/vader_segment."${PREFIX}"* \
             /dev/shm/sm_segment."${PREFIX}"*; do
        [[ "$f" =~ ^/tmp/ompi\.${PREFIX}[0-9]+\.[0-9]+$|^/tmp/prte[a-z]*\.${PREFIX}[0-9]+\.[0-9.]+$|^/dev/shm/(vader|sm)_segment\.${PREFIX}[0-9]+\. ]] && rm -rf -- "$f"
    done
    if [ -f "$STATE/created_run_sshd" ]; then rmdir /run/sshd 2>/dev/null || true; fi
    rm -rf "$STATE"
    log "down in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}

cmd_status() {
    local ns h p
    [ -d "$STATE" ] || { echo "no state dir ($STATE)"; }
    for ns in $(list_ns); do
        h=$ns; p=$(sshd_pid "$h")
        printf '%-12s ip=%-15s sshd_pid=%-7s ' "$h" "$(ip -n "$h" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}')" "${p:--}"
        if [ -f "$STATE/ssh_config" ] && r=$(ssh -F "$STATE/ssh_config" -o ConnectTimeout=2 "$h" hostname 2>&1); then
            echo "ssh-ok($r)"
        else
            echo "ssh-FAIL"
        fi
    done
}

cmd_env() {
    [ -f "$STATE/nhosts" ] || die "not up"
    local n i hosts=""
    n=$(cat "$STATE/nhosts")
    for i in $(seq 1 "$n"); do hosts+="${hosts:+,}${PREFIX}${i}"; done
    cat <<EOF
export HVD_TESTHOSTS="$hosts"
export HVD_TESTHOSTS_SSH_CONFIG="$STATE/ssh_config"
export HVD_TESTHOSTS_CIDR="$CIDR"
export HVD_TESTHOSTS_MASTER_IP="$MASTER_IP"
# Open MPI: ssh via our config (works without the /etc drop-in too), and keep
# its TCP traffic on the test bridge. Open MPI 4 reads OMPI_MCA_*; Open MPI 5's
# runtime (PRRTE) reads PRTE_MCA_* under its own names.
export OMPI_MCA_plm_rsh_agent="ssh -F $STATE/ssh_config"
export OMPI_MCA_oob_tcp_if_include="$CIDR"
export PRTE_MCA_plm_ssh_agent="ssh -F $STATE/ssh_config"
export PRTE_MCA_prte_if_include="$CIDR"
export OMPI_MCA_btl_tcp_if_include="$CIDR"
EOF
}

# Exit 0 when this machine can host fake hosts; otherwise say why and exit 77 (the
# conventional "skipped" code, CTest SKIP_RETURN_CODE).
cmd_check() {
    local why="" t
    [ "$(id -u)" = 0 ] || why="needs root (network namespaces, sshd, /etc/hosts)"
    if [ -z "$why" ]; then
        for t in ip unshare nsenter ssh ssh-keygen "$SSHD" awk mountpoint mpirun; do
            command -v "$t" >/dev/null 2>&1 || { why="missing tool: $t"; break; }
        done
    fi
    # `ip netns exec` makes / a slave mount: in a chroot whose root is no mount point (plain
    # `chroot DIR`) that fails with EINVAL. Bind-mounting the root onto itself first
    # (`mount --rbind DIR DIR`, e.g. in a private mount namespace) makes it one.
    if [ -z "$why" ] && ! mountpoint -q /; then
        why="/ is not a mount point (a chroot?): ip netns exec cannot run here; bind-mount the root onto itself before chroot (mount --rbind DIR DIR)"
    fi
    if [ -z "$why" ]; then
        if ip netns add "${PREFIX}check$$" 2>/dev/null; then
            ip netns exec "${PREFIX}check$$" unshare --uts --mount true 2>/dev/null ||
                why="cannot make UTS/mount namespaces here (container without CAP_SYS_ADMIN?)"
            ip netns del "${PREFIX}check$$" 2>/dev/null || true
        else
            why="cannot create network namespaces here (container without CAP_SYS_ADMIN?)"
        fi
    fi
    if [ -n "$why" ]; then echo "testhosts: SKIP: fake hosts unavailable: $why"; exit 77; fi
}

cmd_forget_hostkey() { # host
    [ -f "$STATE/known_hosts" ] || die "not up"
    local tmp; tmp=$(mktemp)
    awk -v h="$1" '{ split($1, n, ","); if (n[1] != h) print }' "$STATE/known_hosts" >"$tmp"
    cat "$tmp" >"$STATE/known_hosts"; rm -f "$tmp"
}

cmd_learn_hostkeys() {
    [ -f "$STATE/nhosts" ] || die "not up"
    local n i h
    n=$(cat "$STATE/nhosts")
    : >"$STATE/known_hosts"
    for i in $(seq 1 "$n"); do
        h=${PREFIX}${i}
        echo "${h},$(host_ip "$i") $(cut -d' ' -f1,2 "$STATE/$h/ssh_host_ed25519_key.pub")" >>"$STATE/known_hosts"
    done
}

cmd_exec() { # host cmd...
    local h=$1; shift
    local p; p=$(sshd_pid "$h")
    [ -n "$p" ] || die "sshd of $h not running (exec enters its namespaces)"
    # -r: sshd's root too (entering a mount namespace resets the root to the namespace's: in a
    # chroot that would leave it)
    exec nsenter -t "$p" -n -u -m -r -- "$@"
}

case "${1:-}" in
    up) shift; cmd_up "$@" ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    sshd-stop) [ -n "${2:-}" ] || die "usage: $0 sshd-stop HOST"; stop_sshd "$2" ;;
    sshd-start) [ -n "${2:-}" ] || die "usage: $0 sshd-start HOST"; start_sshd "$2" ;;
    exec) [ -n "${3:-}" ] || die "usage: $0 exec HOST CMD..."; shift; cmd_exec "$@" ;;
    check) cmd_check ;;
    forget-hostkey) [ -n "${2:-}" ] || die "usage: $0 forget-hostkey HOST"; cmd_forget_hostkey "$2" ;;
    learn-hostkeys) cmd_learn_hostkeys ;;
    master-only-dir) [ -d "$STATE/master-only" ] || die "not up"; echo "$STATE/master-only" ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
