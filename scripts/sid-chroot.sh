#!/usr/bin/env bash
# Runs a command as root inside a Debian sid chroot that has CPython 3.14 (Debian's python3.14), with this
# repository bind-mounted at the same path: `scripts/sid-chroot.sh CMD [ARGS...]`.
#
# The chroot is made once with debootstrap (about 2 minutes) under ${KEYQUEUE_CACHE:-~/.cache/keyqueue}/sid and
# reused; the host's apt sources, packages and libc are not touched. The mounts (/proc, /dev, /dev/shm, the
# repository) live in a private mount namespace, so they vanish with the command. The chroot also holds what the
# full test suite needs from a system: openssl (TLS certificates), Debian's redis-server and valkey-server.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${KEYQUEUE_CACHE:-$HOME/.cache/keyqueue}
root=$cache/sid
mirror=${KEYQUEUE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=python3.14,python3.14-venv,ca-certificates,openssl,redis-server,valkey-server,procps

mkdir -p "$cache"
exec 9>"$cache/sid.lock"
flock 9
if [ ! -e "$root/.keyqueue-ready" ]; then
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  tmp=$(mktemp -d "$cache/sid.XXXXXX")
  echo "== making a Debian sid chroot with python3.14 in $root (once)" >&2
  if ! debootstrap --variant=minbase --include="$packages" sid "$tmp" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    tail -20 "$cache/debootstrap.log" >&2
    rm -rf "$tmp"
    exit 1
  fi
  rm -rf "$root"
  mv "$tmp" "$root"
  touch "$root/.keyqueue-ready"
fi
flock -u 9
if [ ! -e "$root/usr/bin/valkey-server" ]; then  # a chroot made before valkey-server joined the list
  "$0" sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends valkey-server' >&2
fi

# The host's name servers and CA bundle (a network that inspects TLS has its own CA there).
cp /etc/resolv.conf "$root/etc/resolv.conf"
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
# shellcheck disable=SC2016
exec unshare --mount --propagation private -- sh -c '
  root=$1 repo=$2; shift 2
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
  mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
  mkdir -p "$root$repo"
  mount --bind "$repo" "$root$repo"
  cd "$repo"
  exec chroot "$root" /usr/bin/env -C "$repo" "$@"
' sid-chroot "$root" "$repo" "$@"
