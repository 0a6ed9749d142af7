# Shared by scripts/demo, scripts/test and scripts/bench: install what is
# missing, build into build/. Source it; do not run it.

set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# Everything the project needs, from Debian's packages only.
PERDURE_PACKAGES=(
  g++ cmake make pkg-config ccache libcli11-dev libcpp-httplib-dev
  libcaf-dev libpqxx-dev libcereal-dev libspdlog-dev libsqlite3-dev
  googletest libgtest-dev libbenchmark-dev nlohmann-json3-dev
  libhowardhinnant-date-dev tzdata
  postgresql sqlite3 bsdextrautils
)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

ensure_packages() {
  local missing=()
  for p in "${PERDURE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" \
      || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# ensure_promtool <dir>: Debian's promtool (package prometheus) unpacked
# into <dir>/tools, never installed (that would add a Prometheus server and
# its service to the machine); exports PERDURE_PROMTOOL for the tests that
# check /metrics' text with it. Without it those checks are skipped.
ensure_promtool() {
  local tools="$ROOT/$1/tools"
  if [ ! -x "$tools/promtool" ]; then
    local tmp; tmp=$(mktemp -d)
    if (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1 \
          && dpkg-deb -x prometheus_*.deb x) && [ -x "$tmp/x/usr/bin/promtool" ]; then
      mkdir -p "$tools" && cp "$tmp/x/usr/bin/promtool" "$tools/promtool"
    else
      echo "==> promtool unavailable (apt-get download prometheus failed):" \
           "the metrics format checks are skipped"
    fi
    rm -rf "$tmp"
  fi
  [ -x "$tools/promtool" ] && export PERDURE_PROMTOOL="$tools/promtool"
  return 0
}

# build <dir> [--target <t>]... [cmake -D args...]: configure and compile.
# Warnings are errors under CI (CI=true).
build() {
  local dir="$1"; shift
  local targets=() cmake_args=()
  while [ $# -gt 0 ]; do
    if [ "$1" = "--target" ]; then targets+=(--target "$2"); shift 2
    else cmake_args+=("$1"); shift; fi
  done
  local werror=OFF
  [ -n "${CI:-}" ] && werror=ON
  cmake -S "$ROOT" -B "$ROOT/$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPERDURE_WERROR="$werror" -DPERDURE_BUILD_TESTS=ON -DPERDURE_BUILD_BENCH=ON \
    "${cmake_args[@]}" >/dev/null
  cmake --build "$ROOT/$dir" -j2 "${targets[@]}"
}

# Starts a throwaway PostgreSQL cluster on loopback, as the postgres user,
# in a temporary directory, on a free non-default port; exports
# PERDURE_TEST_PG_URL. Call stop_postgres from an EXIT trap. Tests run with
# fsync=off (PG_EXTRA_OPTS overrides: the benchmarks keep fsync on).
start_postgres() {
  local bin
  bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
  PG_TMP="$(mktemp -d /tmp/perdure-pg.XXXXXX)"
  chown postgres "$PG_TMP" 2>/dev/null || as_root chown postgres "$PG_TMP"
  PG_PORT=$(( 20000 + RANDOM % 20000 ))
  while (echo > "/dev/tcp/127.0.0.1/$PG_PORT") 2>/dev/null; do
    PG_PORT=$(( PG_PORT + 1 ))
  done
  PG_BIN="$bin"
  as_root runuser -u postgres -- "$bin/initdb" -D "$PG_TMP/data" -A trust \
    -U postgres --no-sync >/dev/null
  as_root runuser -u postgres -- "$bin/pg_ctl" -D "$PG_TMP/data" -w -l "$PG_TMP/log" \
    -o "-p $PG_PORT -k $PG_TMP -c listen_addresses=127.0.0.1 -c max_connections=300 ${PG_EXTRA_OPTS:--c fsync=off}" \
    start >/dev/null
  as_root runuser -u postgres -- "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" perdure_test
  export PERDURE_TEST_PG_URL="postgresql://postgres@127.0.0.1:$PG_PORT/perdure_test"
  echo "==> PostgreSQL on 127.0.0.1:$PG_PORT (data in $PG_TMP)"
}

stop_postgres() {
  if [ -n "${PG_TMP:-}" ] && [ -d "$PG_TMP" ]; then
    as_root runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -m immediate \
      stop >/dev/null 2>&1 || true
    rm -rf "$PG_TMP"
  fi
}
