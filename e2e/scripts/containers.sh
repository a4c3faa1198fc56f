#!/usr/bin/env bash
# Makes podman run containers on this kind of machine, idempotently, and says
# why not when it cannot. Sourced by image.sh and kind.sh; `bash containers.sh`
# alone sets up and checks.
#
# Two facts of the hosts these scripts were written on (Debian 12, root without
# CAP_SYS_RESOURCE, hard nofile limit 20000, no kernel modules directory):
# - crun and podman's default ulimits (nofile 1048576) make every container fail
#   to start with "setrlimit ... operation not permitted"; runc with ulimits at or
#   below the hard limits works;
# - podman probes /lib/modules for privileged containers; an empty one will do.
set -euo pipefail

FHS_CACHE="${HYBRID_SCALER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flink-hybrid-scaler}"
FHS_CONTAINERS_CONF=/etc/containers/containers.conf.d/50-flink-hybrid-scaler.conf

containers_fail() {
  cat >&2 <<EOF
containers: $1
  The image and kind tiers need podman running containers as root.
  Fix: run as root (or with sudo) on a Linux host whose kernel allows user and
  mount namespaces, and check with: bash e2e/scripts/containers.sh
EOF
  exit 1
}

containers_apt() {
  local missing=() p
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "containers: apt-get install ${missing[*]}" >&2
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

containers_setup() {
  [ "$(uname -s)" = Linux ] || containers_fail "this is $(uname -s), not Linux"
  [ "$(id -u)" = 0 ] || containers_fail "not root (uid $(id -u)); rootless podman cannot run kind's privileged nodes"
  command -v apt-get >/dev/null || containers_fail "no apt-get: install podman, runc and debootstrap by hand"
  containers_apt podman runc uidmap debootstrap
  local hard_nofile; hard_nofile="$(ulimit -Hn)"
  [ "$hard_nofile" = unlimited ] && hard_nofile=1048576
  local nofile=$(( hard_nofile < 1048576 ? hard_nofile : 1048576 ))
  local want
  want="$(printf '%s\n' \
    '# Written by flink-hybrid-scaler e2e/scripts/containers.sh: runc, and ulimits' \
    '# within the hard limits root has here (it may lack CAP_SYS_RESOURCE).' \
    '[containers]' \
    "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=32768:32768\"]" \
    '[engine]' \
    'runtime = "runc"')"
  if [ "$(cat "$FHS_CONTAINERS_CONF" 2>/dev/null)" != "$want" ]; then
    mkdir -p "$(dirname "$FHS_CONTAINERS_CONF")"
    printf '%s\n' "$want" > "$FHS_CONTAINERS_CONF"
  fi
  [ -d /lib/modules ] || mkdir -p /lib/modules
  local out
  if ! out="$(podman run --rm --network=none --pull=never --rootfs /:O /bin/true 2>&1)"; then
    containers_fail "podman cannot start a container here: $out"
  fi
}

# debootstrap_tar PACKAGES TAR: a Debian bookworm minbase root file system with
# PACKAGES (comma-separated), as an image wants it (no package lists, caches,
# docs, man pages or logs), written as the tarball TAR. Nothing is done if TAR
# exists.
debootstrap_tar() {
  local packages="$1" tar="$2"
  [ -s "$tar" ] && return 0
  local dir; dir="$(dirname "$tar")"
  mkdir -p "$dir"
  local root; root="$(mktemp -d "$dir/rootfs.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$root'" RETURN
  echo "containers: debootstrap bookworm minbase + $packages (first time only, minutes)" >&2
  nice -n 10 debootstrap --variant=minbase --include="$packages" bookworm "$root" \
    "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" > "$tar.log" 2>&1 \
    || { tail -20 "$tar.log" >&2; echo "containers: debootstrap failed (log: $tar.log)" >&2; exit 1; }
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/var/log/*.log "$root"/var/log/apt/* "$root"/tmp/* "$root"/root/.cache
  tar -C "$root" --numeric-owner -cf "$tar.tmp" .
  mv "$tar.tmp" "$tar"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  containers_setup
  echo "containers: podman $(podman --version | awk '{print $3}') runs containers (runtime $(podman info --format '{{.Host.OCIRuntime.Name}}'))"
fi
