#!/usr/bin/env bash
# Every test from a fresh clone: what `make test` and CI (.ci/run) run.
#   1. install the emulators, the catalog servers (.ci/catalogs.sh), pyspark with the Iceberg
#      Spark runtime (.ci/spark.sh) and the pinned tools (idempotent; cold about 8 min, warm
#      a few seconds)
#   2. start the emulators and the catalog servers, unless they are already running (then they
#      are reused and left running); the ones started here are stopped on exit
#   3. go vet, unit tests (-race), integration tests (-race, -tags integration), golangci-lint,
#      and the deployment artifacts (.ci/validate-deploy.sh: Helm chart linted and rendered,
#      CloudFormation cfn-lint, alert rules through promtool; it installs its pinned tools)
# Every step in 3 runs even if an earlier one failed; the exit status is non-zero if any failed.
# Environment: DMS2ICEBERG_RACE (default 1: the e2e tests run a -race binary),
#   INTEGRATION_TIMEOUT (default 60m), TEST_ARGS (extra go test flags, e.g. "-run Foo").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

t() { date +%s; }
T0=$(t)
LOGS="$EMU_DIR/logs"; mkdir -p "$LOGS"
section() { printf '\n=== %s\n' "$*"; }

section "install emulators, catalog servers, Spark and tools"
.ci/emulators.sh install
.ci/catalogs.sh install
.ci/spark.sh install
.ci/tools.sh install

# Servers started here are stopped on exit; servers found running are reused and left running.
STOP_ON_EXIT=()
stop_started() { local s; for s in "${STOP_ON_EXIT[@]}"; do "$s" stop >/dev/null 2>&1 || true; done; }
trap stop_started EXIT
trap 'exit 130' INT TERM
start_servers() { # script what
  section "start $2"
  if "$1" status >/dev/null 2>&1; then
    echo "$2 already running: reusing them and leaving them running"
    "$1" status
  else
    STOP_ON_EXIT+=("$1")
    "$1" start
  fi
}
start_servers .ci/emulators.sh emulators
start_servers .ci/catalogs.sh "catalog servers"
eval "$(.ci/emulators.sh env)"
eval "$(.ci/catalogs.sh env)"
eval "$(.ci/spark.sh env)"
export DMS2ICEBERG_RACE=${DMS2ICEBERG_RACE:-1}

failed=()
step() { # name command...
  local name=$1 s; shift; s=$(t)
  section "$name"
  if "$@"; then echo "--- $name: ok ($(( $(t) - s ))s)"
  else echo "--- $name: FAILED ($(( $(t) - s ))s)"; failed+=("$name"); fi
}

UNIT_JSON="$LOGS/test-unit.json"; IT_JSON="$LOGS/test-integration.json"
rm -f "$UNIT_JSON" "$IT_JSON"
# shellcheck disable=SC2086 # TEST_ARGS is a list of flags
step "go vet" go vet ./...
step "go vet (integration)" go vet -tags integration ./integration/...
step "unit tests" gotestsum --format pkgname-and-test-fails --jsonfile "$UNIT_JSON" -- \
  -race -count=1 ${TEST_ARGS:-} ./...
# pkg/fault's armed half only builds with the faults tag (the chaos harness's binaries).
FAULT_JSON="$LOGS/test-fault.json"; rm -f "$FAULT_JSON"
step "unit tests (faults tag)" gotestsum --format pkgname-and-test-fails --jsonfile "$FAULT_JSON" -- \
  -race -count=1 -tags faults ./pkg/fault/...
step "integration tests" gotestsum --format standard-verbose --jsonfile "$IT_JSON" -- \
  -race -count=1 -tags integration -timeout "${INTEGRATION_TIMEOUT:-60m}" ${TEST_ARGS:-} ./integration/...
step "golangci-lint" golangci-lint run -c .ci/golangci.yml ./...
step "deployment artifacts" .ci/validate-deploy.sh

# Count tests (subtests included) from go test's JSON events.
count() { cat "$UNIT_JSON" "$FAULT_JSON" "$IT_JSON" 2>/dev/null | grep -c "\"Action\":\"$1\",\"Package\":\"[^\"]*\",\"Test\":" || true; }
section "summary ($(( $(t) - T0 ))s)"
if [ ${#failed[@]} -gt 0 ]; then echo "failed steps: ${failed[*]}"; else echo "all steps passed"; fi
echo "tests: $(count pass) passed, $(count fail) failed, $(count skip) skipped"
# Name every failed test and show the end of its output, so the tail of a CI log says what broke.
if [ "$(count fail)" != 0 ]; then
  cat "$UNIT_JSON" "$FAULT_JSON" "$IT_JSON" 2>/dev/null | python3 -c '
import json, sys
out, failed = {}, []
for line in sys.stdin:
    try: e = json.loads(line)
    except ValueError: continue
    k = (e.get("Package"), e.get("Test"))
    if k[1] is None: continue
    if e.get("Action") == "output": out.setdefault(k, []).append(e.get("Output", ""))
    elif e.get("Action") == "fail" and k not in failed: failed.append(k)
for k in failed:
    print("end of %s %s:" % k)
    lines = [l for l in "".join(out.get(k, [])).splitlines() if not l.startswith(("=== RUN", "=== PAUSE", "=== CONT"))]
    for l in lines[-12:]: print("  | " + l[:300])
print("failed tests: " + " ".join("%s.%s" % (p.rsplit("/", 1)[-1], t) for p, t in failed))
' || true
fi
[ ${#failed[@]} -eq 0 ]
