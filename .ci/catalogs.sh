#!/usr/bin/env bash
# Install and run the catalog servers the integration tests use, as plain processes (no Docker):
#
# usage: .ci/catalogs.sh install|start|stop|restart|status|env|up
#   install  idempotent, quiet: prints one line per thing it actually installs, nothing otherwise
#   start    starts what is not running yet and waits until each answers; refuses (exit 1) if a
#            port is taken by anything that is not ours; pid files go to $EMU_DIR/<name>.pid
#   stop     stops each server (SIGTERM to its process group; pg_ctl stop -m fast for PostgreSQL)
#   status   one line per server; exit 0 only if all three are running and answering
#   env      prints the export lines the integration tests read:  eval "$(.ci/catalogs.sh env)"
#   up       install + start
#
# Servers:
#   moto      AWS Glue for iceberg-go's Glue catalog (glue.endpoint): moto's server mode, from PyPI
#             (moto[server]) in a venv under $EMU_DIR/moto-venv; in memory          port 5050
#   rest      Apache Iceberg's REST catalog server (org.apache.iceberg.rest.RESTCatalogServer, the
#             code of the apache/iceberg-rest-fixture image) from Maven Central (.ci/rest-fixture/
#             pom.xml), run with java; backend: JdbcCatalog on SQLite, warehouse file://
#             $EMU_DIR/data/rest/warehouse. Its state is wiped at every start.      port 8181
#   postgres  PostgreSQL from Debian (apt package postgresql), our own cluster in
#             $EMU_DIR/data/postgres (trust auth, loopback only), database dms2iceberg   port 55432
# Ports can be moved with MOTO_PORT, REST_PORT, PG_PORT.
# State lives in EMU_DIR (default: <repo>/.emu, derived from this script's location).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
EMU_DIR=${EMU_DIR:-"$ROOT/.emu"}
mkdir -p "$EMU_DIR"
EMU_DIR=$(cd "$EMU_DIR" && pwd)

# Pinned versions (not overridable: CI and every developer run the same servers).
MOTO_VERSION=5.2.5                 # PyPI moto[server]
ICEBERG_REST_VERSION=1.10.1        # Maven org.apache.iceberg (keep in step with .ci/rest-fixture/pom.xml)
POSTGRES_APT_PACKAGE=postgresql    # Debian 12: PostgreSQL 15
JAVA_APT_PACKAGE=openjdk-17-jre-headless

MOTO_PORT=${MOTO_PORT:-5050}
REST_PORT=${REST_PORT:-8181}
PG_PORT=${PG_PORT:-55432}
PG_DB=dms2iceberg

BIN="$EMU_DIR/bin"; DATA="$EMU_DIR/data"; LOGS="$EMU_DIR/logs"
MOTO_VENV="$EMU_DIR/moto-venv"
REST_POM="$ROOT/.ci/rest-fixture/pom.xml"
REST_LIB="$EMU_DIR/rest-fixture/lib"
PG_DATA="$DATA/postgres"
PG_SOCK="$DATA/postgres-run"

NAMES="moto rest postgres"

die() { echo "catalogs.sh: $*" >&2; exit 1; }
t() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(t)" 'BEGIN{printf "%.1f", b-a}'; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
  die "need root (or sudo) to run: $*"; fi; }

apt_install() { # packages...
  local s; s=$(t)
  command -v apt-get >/dev/null || die "$* missing and apt-get is not available: install it by hand"
  mkdir -p "$LOGS"
  if ! { as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@"; } \
      >"$LOGS/apt-install-catalogs.log" 2>&1; then
    tail -20 "$LOGS/apt-install-catalogs.log" >&2; die "apt-get install $* failed (log: $LOGS/apt-install-catalogs.log)"
  fi
  echo "install: apt $* $(since "$s")s"
}

# pg_bin: the directory of the newest installed PostgreSQL server binaries, or nothing.
pg_bin() { local d; d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1); [ -x "$d/postgres" ] && echo "$d"; return 0; }

# The PostgreSQL server refuses to run as root: as root it runs as the postgres user that the
# Debian package creates.
pg_user() { if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

rest_stamp() { echo "$ICEBERG_REST_VERSION $(sha256sum "$REST_POM" | cut -c1-16)"; }

install() {
  mkdir -p "$BIN" "$DATA" "$LOGS"
  local s
  command -v curl >/dev/null || apt_install curl ca-certificates
  command -v java >/dev/null || apt_install "$JAVA_APT_PACKAGE"
  command -v mvn >/dev/null || apt_install maven
  command -v python3 >/dev/null || apt_install python3 python3-venv
  [ -n "$(pg_bin)" ] || apt_install "$POSTGRES_APT_PACKAGE"
  [ -n "$(pg_bin)" ] || die "no PostgreSQL server binaries under /usr/lib/postgresql after installing $POSTGRES_APT_PACKAGE"
  id postgres >/dev/null 2>&1 || [ "$(id -u)" != 0 ] || die "no postgres user (the Debian package creates it)"

  if [ "$("$MOTO_VENV/bin/python" -c 'import moto; print(moto.__version__)' 2>/dev/null)" != "$MOTO_VERSION" ]; then
    s=$(t)
    { [ -x "$MOTO_VENV/bin/pip" ] || python3 -m venv "$MOTO_VENV"; } >"$LOGS/pip-moto.log" 2>&1 ||
      { tail -20 "$LOGS/pip-moto.log" >&2; die "python3 -m venv failed (Debian: apt-get install python3-venv)"; }
    if ! "$MOTO_VENV/bin/pip" install --disable-pip-version-check -q "moto[server]==$MOTO_VERSION" >>"$LOGS/pip-moto.log" 2>&1; then
      tail -30 "$LOGS/pip-moto.log" >&2; die "pip install moto[server]==$MOTO_VERSION failed (log: $LOGS/pip-moto.log)"
    fi
    echo "install: moto[server] $MOTO_VERSION $(since "$s")s"
  fi

  if [ "$(cat "$REST_LIB/.stamp" 2>/dev/null)" != "$(rest_stamp)" ]; then
    s=$(t)
    rm -rf "$REST_LIB"; mkdir -p "$REST_LIB"
    if ! mvn -B -q -f "$REST_POM" -Diceberg.version="$ICEBERG_REST_VERSION" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$REST_LIB" >"$LOGS/mvn-rest-fixture.log" 2>&1; then
      tail -30 "$LOGS/mvn-rest-fixture.log" >&2; die "fetching the REST catalog server's jars failed (log: $LOGS/mvn-rest-fixture.log)"
    fi
    ls "$REST_LIB"/iceberg-open-api-*-test-fixtures.jar >/dev/null 2>&1 || die "no iceberg-open-api test-fixtures jar in $REST_LIB"
    rest_stamp >"$REST_LIB/.stamp"
    echo "install: Iceberg REST catalog server $ICEBERG_REST_VERSION ($(ls "$REST_LIB"/*.jar | wc -l) jars) $(since "$s")s"
  fi
}

# ---------------------------------------------------------------------------------------------
# process bookkeeping (the same rules as .ci/emulators.sh)

main_port() { case $1 in moto) echo "$MOTO_PORT" ;; rest) echo "$REST_PORT" ;; postgres) echo "$PG_PORT" ;; esac; }
# A process is "ours" when its command line names this EMU_DIR's copy of the server.
signature() { case $1 in moto) echo "$MOTO_VENV/" ;; rest) echo "$REST_LIB/" ;; postgres) echo "$PG_DATA" ;; esac; }

cmdline() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true; }
is_ours() { # name pid
  [ -n "$2" ] && kill -0 "$2" 2>/dev/null && case "$(cmdline "$2")" in *"$(signature "$1")"*) return 0 ;; esac; return 1
}

port_owner() {
  local out pid
  if command -v ss >/dev/null; then
    out=$(ss -H -ltnp "sport = :$1" 2>/dev/null || true)
    [ -z "$out" ] && return 0
    pid=$(grep -o 'pid=[0-9]*' <<<"$out" | head -1 | cut -d= -f2)
    echo "${pid:-?}"; return 0
  fi
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && echo "?"
  return 0
}

# running_pid NAME: pid of our running server, or nothing. PostgreSQL's own pid file
# (postmaster.pid) is the truth for postgres.
running_pid() {
  local pf="$EMU_DIR/$1.pid" pid=""
  if [ "$1" = postgres ] && [ -f "$PG_DATA/postmaster.pid" ]; then head -1 "$PG_DATA/postmaster.pid" >"$pf"; fi
  [ -f "$pf" ] && pid=$(cat "$pf" 2>/dev/null || true)
  if is_ours "$1" "$pid"; then echo "$pid"; return 0; fi
  rm -f "$pf"
  pid=$(port_owner "$(main_port "$1")")
  if [ "$pid" != "?" ] && is_ours "$1" "$pid"; then echo "$pid" >"$pf"; echo "$pid"; fi
  return 0
}

# probe NAME: prints a status: an HTTP code (000 if none) for the HTTP servers; "ok" or "000"
# for PostgreSQL.
probe() {
  local code
  case $1 in
    moto) code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$MOTO_PORT/moto-api/") ;;
    rest) code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$REST_PORT/v1/config") ;;
    postgres) if "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -t 2 2>/dev/null; then code=ok; fi ;;
  esac
  echo "${code:-000}"
}

wait_ready() { # NAME PID TIMEOUT
  local name=$1 pid=$2 to=$3 s code; s=$(t)
  while code=$(probe "$name"); [ "$code" = 000 ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "catalogs.sh: $name exited during startup; last lines of $LOGS/$name.log:" >&2
      tail -20 "$LOGS/$name.log" >&2; return 1
    fi
    if awk -v a="$s" -v b="$(t)" -v to="$to" 'BEGIN{exit !(b-a>to)}'; then
      echo "catalogs.sh: $name not answering after ${to}s; last lines of $LOGS/$name.log:" >&2
      tail -20 "$LOGS/$name.log" >&2; return 1
    fi
    sleep 0.2
  done
  echo "ready: $name pid $pid 127.0.0.1:$(main_port "$name") ($code) in $(since "$s")s"
}

# launch NAME CMD...: CMD in its own session (stop signals the whole group), working directory
# $DATA/NAME, output to $LOGS/NAME.log; the child writes its own pid file.
launch() {
  local name=$1 pf="$EMU_DIR/$1.pid"; shift
  rm -f "$pf"; mkdir -p "$DATA/$name"
  (cd "$DATA/$name" && exec setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pf" "$@") </dev/null >"$LOGS/$name.log" 2>&1 &
  local i
  for i in $(seq 50); do [ -s "$pf" ] && break; sleep 0.1; done
  [ -s "$pf" ] || die "$name: no pid file after 5s"
}

pg_init() {
  local bin; bin=$(pg_bin); [ -n "$bin" ] || die "PostgreSQL is not installed: run $0 install"
  mkdir -p "$PG_SOCK"
  [ "$(id -u)" = 0 ] && chown "$(pg_user)" "$PG_SOCK"
  [ -f "$PG_DATA/PG_VERSION" ] && return 0
  local s; s=$(t)
  rm -rf "$PG_DATA"; mkdir -p "$PG_DATA"
  [ "$(id -u)" = 0 ] && chown "$(pg_user)" "$PG_DATA"
  as_pg "$bin/initdb" -D "$PG_DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$LOGS/postgres-initdb.log" 2>&1 ||
    { tail -20 "$LOGS/postgres-initdb.log" >&2; die "initdb failed (log: $LOGS/postgres-initdb.log)"; }
  echo "initdb: $PG_DATA $(since "$s")s"
}

start_one() {
  local name=$1
  case $name in
    moto)
      [ -x "$MOTO_VENV/bin/moto_server" ] || die "moto is not installed: run $0 install"
      launch moto env AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test \
        "$MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" ;;
    rest)
      [ -f "$REST_LIB/.stamp" ] || die "the REST catalog server is not installed: run $0 install"
      # A fresh catalog at every start, like moto's in-memory state: tests use unique namespaces.
      rm -rf "$DATA/rest"; mkdir -p "$DATA/rest/warehouse"
      launch rest env CATALOG_URI="jdbc:sqlite:file:$DATA/rest/catalog.db" \
        CATALOG_WAREHOUSE="file://$DATA/rest/warehouse" CATALOG_REST_PORT="$REST_PORT" \
        CATALOG_JDBC_SCHEMA__VERSION=V1 \
        java -Xmx512m -XX:+UseSerialGC -cp "$REST_LIB/*" org.apache.iceberg.rest.RESTCatalogServer ;;
    postgres)
      pg_init
      rm -f "$EMU_DIR/postgres.pid"
      touch "$LOGS/postgres.log"; [ "$(id -u)" = 0 ] && chown "$(pg_user)" "$LOGS/postgres.log"
      as_pg "$(pg_bin)/pg_ctl" -D "$PG_DATA" -l "$LOGS/postgres.log" -w -t 60 \
        -o "-p $PG_PORT -k $PG_SOCK -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start \
        >"$LOGS/postgres-ctl.log" 2>&1 || { tail -20 "$LOGS/postgres.log" >&2; die "pg_ctl start failed (log: $LOGS/postgres.log)"; }
      head -1 "$PG_DATA/postmaster.pid" >"$EMU_DIR/postgres.pid"
      if ! as_pg "$(pg_bin)/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$PG_DB'" | grep -q 1; then
        as_pg "$(pg_bin)/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres "$PG_DB" || die "createdb $PG_DB failed"
      fi ;;
  esac
}

start() {
  command -v curl >/dev/null || die "curl is missing: run $0 install"
  mkdir -p "$DATA" "$LOGS"
  local name pid owner s to; s=$(t)
  local todo=()
  for name in $NAMES; do
    pid=$(running_pid "$name")
    [ -n "$pid" ] && { echo "running: $name pid $pid 127.0.0.1:$(main_port "$name")"; continue; }
    owner=$(port_owner "$(main_port "$name")")
    if [ -n "$owner" ]; then
      die "port $(main_port "$name") (for $name) is in use by ${owner/#\?/a process we cannot identify} $( [ "$owner" != "?" ] && cmdline "$owner"), which is not ours.
  Stop it, or move ours with ${name^^}_PORT=... (PG_PORT for postgres; see the header of $0)."
    fi
    todo+=("$name")
  done
  [ ${#todo[@]} -eq 0 ] && return 0
  for name in "${todo[@]}"; do start_one "$name"; done
  local ok=1
  for name in "${todo[@]}"; do
    case $name in rest) to=90 ;; *) to=60 ;; esac
    wait_ready "$name" "$(cat "$EMU_DIR/$name.pid")" "$to" || ok=0
  done
  if [ $ok = 0 ]; then stop >&2; die "start failed; stopped what was started"; fi
  echo "started: ${todo[*]} in $(since "$s")s"
}

stop() {
  local name pid i
  for name in $NAMES; do
    pid=$(running_pid "$name")
    if [ -z "$pid" ]; then rm -f "$EMU_DIR/$name.pid"; continue; fi
    if [ "$name" = postgres ]; then
      as_pg "$(pg_bin)/pg_ctl" -D "$PG_DATA" -m fast -w -t 30 stop >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
    else
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  for name in $NAMES; do
    [ -f "$EMU_DIR/$name.pid" ] || continue
    pid=$(cat "$EMU_DIR/$name.pid")
    for i in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "catalogs.sh: $name pid $pid ignored SIGTERM for 20s; sending SIGKILL" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$EMU_DIR/$name.pid"
    echo "stopped: $name pid $pid"
  done
}

status() {
  local name pid code rc=0
  for name in $NAMES; do
    pid=$(running_pid "$name")
    if [ -z "$pid" ]; then
      printf '%-8s down         127.0.0.1:%s\n' "$name" "$(main_port "$name")"; rc=1; continue
    fi
    code=$(probe "$name")
    if [ "$code" = 000 ]; then
      printf '%-8s pid %-8s 127.0.0.1:%s NOT ANSWERING (log: %s)\n' "$name" "$pid" "$(main_port "$name")" "$LOGS/$name.log"; rc=1
    else
      printf '%-8s pid %-8s 127.0.0.1:%s up (%s)\n' "$name" "$pid" "$(main_port "$name")" "$code"
    fi
  done
  return $rc
}

env_() {
  cat <<EOT
export DMS2ICEBERG_IT_GLUE_ENDPOINT=http://127.0.0.1:$MOTO_PORT
export DMS2ICEBERG_IT_REST_URI=http://127.0.0.1:$REST_PORT
export DMS2ICEBERG_IT_POSTGRES_URI=postgres://postgres@127.0.0.1:$PG_PORT/$PG_DB?sslmode=disable
EOT
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status ;;
  env) env_ ;;
  up) install; start ;;
  *) echo "usage: $0 install|start|stop|restart|status|env|up" >&2; exit 2 ;;
esac
