# Throwaway PostgreSQL server for the tests. Source this file, then call pg_start (it exports
# IDEM_TEST_PG_DSN and stops the server on exit) or pg_stop. Standalone:
#   .ci/postgres.sh start   # prints the DSN and the data directory
#   .ci/postgres.sh stop DATADIR
# Debian's postgresql package is installed if initdb is missing. As root, the server runs as
# the postgres user (PostgreSQL refuses to run as root). Set PG_PORT to pick the port;
# otherwise a free loopback port is chosen. fsync is off: the data is thrown away (a commit
# still reaches the OS before it is acknowledged, so it survives a crash of PostgreSQL, not of
# the machine). synchronous_commit stays on: pgstore refuses a pool without it. PG_OPTIONS
# adds server options, later ones winning: PG_OPTIONS="-c fsync=on -c full_page_writes=on"
# gives durable commits for benchmarks.

pg_bindir() {
  if command -v initdb >/dev/null 2>&1; then dirname "$(readlink -f "$(command -v initdb)")"; return; fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$d" ] && [ -x "$d/initdb" ]; then echo "$d"; return; fi
  echo "== installing Debian's postgresql package" >&2
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2 || return 1
  d=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  echo "$d"
}

# pg_as runs a command as the server's user: postgres when we are root, else ourselves.
pg_as() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 30000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}

# pg_start initdb's a temporary cluster, starts it and exports IDEM_TEST_PG_DSN (database
# idem_test), IDEM_TEST_PG_RESTART (a command that crash-restarts it), PG_DATADIR and PG_BIN.
# It installs an EXIT trap that calls pg_stop.
pg_start() {
  PG_BIN=$(pg_bindir) || { echo "postgres: no initdb and the install failed" >&2; return 1; }
  local port=${PG_PORT:-$(pg_free_port)}
  PG_DATADIR=$(mktemp -d /tmp/idem-pg.XXXXXX)
  if [ "$(id -u)" = 0 ]; then chown postgres: "$PG_DATADIR"; fi
  pg_as "$PG_BIN/initdb" -D "$PG_DATADIR/data" -U postgres -A trust -E UTF8 --no-sync >"$PG_DATADIR/initdb.log" 2>&1 ||
    { cat "$PG_DATADIR/initdb.log" >&2; return 1; }
  trap pg_stop EXIT
  pg_as "$PG_BIN/pg_ctl" -D "$PG_DATADIR/data" -l "$PG_DATADIR/server.log" -w -t 60 \
    -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$PG_DATADIR -c fsync=off -c full_page_writes=off -c max_connections=200 -c max_prepared_transactions=4 ${PG_OPTIONS:-}" \
    start >/dev/null || { cat "$PG_DATADIR/server.log" >&2; return 1; }
  pg_as "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAtc 'CREATE DATABASE idem_test' >/dev/null
  export PG_BIN PG_DATADIR
  export IDEM_TEST_PG_DSN="postgres://postgres@127.0.0.1:$port/idem_test?sslmode=disable"
  # idemserver/pgserver's TestPostgresRestart crash-restarts this throwaway server with it.
  local as_pg=""
  if [ "$(id -u)" = 0 ]; then as_pg="runuser -u postgres --"; fi
  export IDEM_TEST_PG_RESTART="$as_pg '$PG_BIN/pg_ctl' -D '$PG_DATADIR/data' -l '$PG_DATADIR/server.log' -m immediate -w restart"
  echo "== postgres started: $IDEM_TEST_PG_DSN (data in $PG_DATADIR)"
}

# pg_stop stops the server started by pg_start (or the one in $1) and removes its directory.
pg_stop() {
  local dir=${1:-${PG_DATADIR:-}}
  [ -n "$dir" ] && [ -d "$dir/data" ] || return 0
  local bin=${PG_BIN:-$(pg_bindir)}
  pg_as "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
  echo "== postgres stopped"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case "${1:-}" in
    start) pg_start; trap - EXIT; echo "export IDEM_TEST_PG_DSN='$IDEM_TEST_PG_DSN'; stop with: $0 stop $PG_DATADIR" ;;
    stop) pg_stop "${2:?data directory}" ;;
    *) echo "usage: $0 start | stop DATADIR" >&2; exit 2 ;;
  esac
fi
