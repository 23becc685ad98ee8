#!/usr/bin/env bash
# make demo: run the service on the embedded default (SQLite catalog + local warehouse under .data/)
# with generated demo traffic, until Ctrl-C.
#   1. install and start the emulators (ones already running are reused and left running; the
#      ones started here are stopped on exit)
#   2. build bin/dms2iceberg
#   3. create the Kinesis stream dms2iceberg-demo (4 shards) unless it exists
#   4. run `bin/dms2iceberg demo [DEMO_ARGS...]` in the foreground
# Arguments to this script are passed to `dms2iceberg demo` (make demo DEMO_ARGS="...").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

STREAM=${DEMO_STREAM:-dms2iceberg-demo}
SHARDS=${DEMO_SHARDS:-4}

.ci/emulators.sh install
if .ci/emulators.sh status >/dev/null 2>&1; then
  echo "emulators already running: reusing them and leaving them running"
else
  trap '.ci/emulators.sh stop || true' EXIT
  .ci/emulators.sh start
fi
eval "$(.ci/emulators.sh env)"

go build -o bin/dms2iceberg ./cmd/dms2iceberg
.ci/emulators.sh create-stream "$STREAM" "$SHARDS"

export DMS2ICEBERG_STREAM="$STREAM" DMS2ICEBERG_DATA_DIR="${DMS2ICEBERG_DATA_DIR:-$ROOT/.data}"
echo "demo: stream $STREAM, data in $DMS2ICEBERG_DATA_DIR; Ctrl-C to stop"
# The demo runs in its own process group (job control on when there is a terminal), so the
# terminal's Ctrl-C reaches this script only and is passed on once, as one SIGINT: the service
# then shuts down gracefully while the emulators (in their own sessions) are still up; the EXIT
# trap stops them afterwards.
if [ -t 0 ]; then set -m; fi
bin/dms2iceberg demo "$@" &
pid=$!
trap 'kill -INT "$pid" 2>/dev/null || true' INT
trap 'kill -TERM "$pid" 2>/dev/null || true' TERM
# A closed terminal (SIGHUP) must not stop the emulators under a service still shutting down.
trap 'kill -TERM "$pid" 2>/dev/null || true' HUP
rc=0
while :; do
  wait "$pid" && rc=0 || rc=$?
  kill -0 "$pid" 2>/dev/null || break   # wait also returns when a trap ran
done
# 130 = stopped by Ctrl-C: that is how a demo ends.
[ "$rc" = 0 ] || [ "$rc" = 130 ] || { echo "demo: dms2iceberg exited with status $rc" >&2; exit "$rc"; }
