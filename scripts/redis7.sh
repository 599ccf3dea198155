#!/usr/bin/env bash
# A Redis 7 server for the tests, from Debian's own packages (redis-server, redis-tools and the two libraries
# they need that a plain Debian image lacks), unpacked into a cache folder with dpkg-deb: nothing is installed
# and no system service is started. Prints the path of a redis-server wrapper; point the tests at it with
# KEYQUEUE_REDIS_SERVER="$(scripts/redis7.sh)". Idempotent: a second run reuses the cache.
set -euo pipefail
cache=${KEYQUEUE_REDIS7_CACHE:-${KEYQUEUE_CACHE:-$HOME/.cache/keyqueue}/redis7}
wrapper="$cache/redis-server"
if [ -x "$wrapper" ] && "$wrapper" --version >/dev/null 2>&1; then
  echo "$wrapper"
  exit 0
fi
mkdir -p "$cache/debs" "$cache/root"
(
  cd "$cache/debs"
  # apt-get download runs as the _apt user where it can; the folder must be writable for it
  chmod 0777 . 2>/dev/null || true
  get() { apt-get download redis-server redis-tools libjemalloc2 liblzf1 2>&1 >/dev/null | grep -v unsandboxed >&2 || true; }
  get
  if ! ls redis-tools_*.deb >/dev/null 2>&1; then
    apt-get update -qq >&2  # a fresh machine may have no package lists yet
    get
  fi
  ls redis-tools_*.deb >/dev/null
)
for deb in "$cache"/debs/*.deb; do
  dpkg-deb -x "$deb" "$cache/root"
done
binary="$cache/root/usr/bin/redis-check-rdb"  # Debian's redis-server is this binary, run under the name redis-server
libs=$(dirname "$(find "$cache/root" -name 'liblzf.so*' | head -n 1)")
cat >"$wrapper" <<WRAP
#!/usr/bin/env bash
LD_LIBRARY_PATH="$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec -a redis-server "$binary" "\$@"
WRAP
chmod +x "$wrapper"
"$wrapper" --version >&2
echo "$wrapper"
