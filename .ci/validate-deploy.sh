#!/usr/bin/env bash
# Check the deployment artifacts under docs/deploy and the examples under docs/examples:
#   helm lint --strict and helm template of docs/deploy/helm/dms2iceberg (default values, each
#     docs/examples/*.yaml as the chart's config, and the refusals the chart must make)
#   cfn-lint docs/deploy/cloudformation.yaml
#   promtool check rules docs/deploy/alerts.yaml, promtool test rules docs/deploy/alerts_test.yaml
#   python3 -m json.tool on every JSON file there (IAM policy, Grafana dashboard, DMS settings)
#   every dms2iceberg_* metric the alerts and the dashboard use is documented in docs/deploy.md
# Installs helm, promtool and cfn-lint first (.ci/tools.sh deploy; pinned there).
# usage: .ci/validate-deploy.sh     exit 0 when every check passed, 1 otherwise (each failure named)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export EMU_DIR=${EMU_DIR:-"$ROOT/.emu"}
export PATH="$PATH:/usr/local/go/bin"
.ci/tools.sh deploy || { echo "validate-deploy: installing the tools failed" >&2; exit 1; }
BIN=$(.ci/tools.sh path)
HELM="$BIN/helm" PROMTOOL="$BIN/promtool" CFN_LINT="$BIN/cfn-lint"
PY="$EMU_DIR/cfn-venv/bin/python" # has PyYAML (a cfn-lint dependency)
CHART=docs/deploy/helm/dms2iceberg
# helm built by go install carries no Kubernetes version of its own (it assumes v1.20); the chart
# needs at least 1.25 (kubeVersion in Chart.yaml).
KUBE=(--kube-version 1.30.0)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

failed=()
t() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(t)" 'BEGIN{printf "%.1f", b-a}'; }
# check NAME CMD...: run CMD, print its output only when it fails.
check() {
  local name=$1; shift
  local s; s=$(t)
  if "$@" >"$TMP/out" 2>&1; then
    echo "ok   $name ($(since "$s")s)"
  else
    echo "FAIL $name ($(since "$s")s)"
    sed 's/^/     /' "$TMP/out"
    failed+=("$name")
  fi
}
# refuses NAME PATTERN CMD...: CMD must fail with output matching PATTERN.
refuses() {
  local name=$1 pattern=$2; shift 2
  if "$@" >"$TMP/out" 2>&1; then
    echo "FAIL $name: accepted"; failed+=("$name")
  elif grep -q -- "$pattern" "$TMP/out"; then
    echo "ok   $name"
  else
    echo "FAIL $name: refused for another reason:"; sed 's/^/     /' "$TMP/out"; failed+=("$name")
  fi
}
# as_values EXAMPLE: the example configuration as chart values (the map form, under config:).
as_values() {
  { echo "config:"; sed -e 's/^/  /' "$1"; } >"$TMP/values-$(basename "$1")"
  echo "$TMP/values-$(basename "$1")"
}
# rendered_yaml FILE [MODE EXAMPLE]: helm template output parses as YAML documents, each with kind
# and apiVersion, and the probes are on /healthz and /readyz. MODE text: the ConfigMap's
# config.yaml is EXAMPLE's text unchanged; MODE map: it is EXAMPLE's configuration with http_addr
# and data_dir set by the chart.
rendered_yaml() {
  "$PY" - "$@" <<'PYEOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]
kinds = sorted(d["kind"] for d in docs)
assert all("apiVersion" in d for d in docs), "a document without apiVersion"
for want in ("ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "ServiceAccount"):
    assert want in kinds, f"{want} missing from {kinds}"
cm = next(d for d in docs if d["kind"] == "ConfigMap")
text = cm["data"]["config.yaml"]
cfg = yaml.safe_load(text)
assert cfg["http_addr"].startswith("0.0.0.0:"), cfg["http_addr"]
dep = next(d for d in docs if d["kind"] == "Deployment")
c = dep["spec"]["template"]["spec"]["containers"][0]
assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
assert {"name": "DMS2ICEBERG_DATA_DIR", "value": "/data"} in c["env"], c["env"]
if len(sys.argv) > 3:
    mode, example = sys.argv[2], sys.argv[3]
    if mode == "text":
        want = open(example).read()
        assert text.rstrip("\n") == want.rstrip("\n"), f"config.yaml is not {example} verbatim"
    else:
        want = yaml.safe_load(open(example))
        want["http_addr"], want["data_dir"] = cfg["http_addr"], "/data"
        assert cfg == want, f"rendered config differs from {example}:\n{cfg}\n{want}"
PYEOF
}

check "helm lint" "$HELM" lint --strict "${KUBE[@]}" "$CHART"
check "helm template (default values)" "$HELM" template dms2iceberg "$CHART" "${KUBE[@]}" --output-dir "$TMP/render-default"
"$HELM" template dms2iceberg "$CHART" "${KUBE[@]}" >"$TMP/default.yaml" 2>/dev/null
check "rendered manifests (default values)" rendered_yaml "$TMP/default.yaml"
check "helm template (IRSA role, 3 replicas)" "$HELM" template dms2iceberg "$CHART" "${KUBE[@]}" \
  --set serviceAccount.roleArn=arn:aws:iam::123456789012:role/dms2iceberg --set replicaCount=3
for ex in docs/examples/*.yaml; do
  check "helm lint with $ex" "$HELM" lint --strict "${KUBE[@]}" "$CHART" --set-file configYaml="$ex"
  "$HELM" template dms2iceberg "$CHART" "${KUBE[@]}" --set-file configYaml="$ex" >"$TMP/ex.yaml" 2>&1
  check "rendered manifests with $ex (configYaml)" rendered_yaml "$TMP/ex.yaml" text "$ex"
done
# The map form, with an example that has no YAML 1.1 boolean look-alikes (n, y, on, off, ...).
"$HELM" template dms2iceberg "$CHART" "${KUBE[@]}" -f "$(as_values docs/examples/postgres-sql.yaml)" >"$TMP/map.yaml" 2>&1
check "rendered manifests with docs/examples/postgres-sql.yaml (config map)" rendered_yaml "$TMP/map.yaml" map docs/examples/postgres-sql.yaml
refuses "chart refuses an http_addr the probes cannot reach" "set http_addr" \
  "$HELM" template dms2iceberg "$CHART" "${KUBE[@]}" --set-string configYaml="stream: s"
refuses "chart refuses SQLite without persistence" "persistence.enabled" \
  "$HELM" template dms2iceberg "$CHART" "${KUBE[@]}" --set config.stream=s --set config.sink.catalog.type=sql
refuses "chart refuses SQLite with two replicas" "one replica only" \
  "$HELM" template dms2iceberg "$CHART" "${KUBE[@]}" --set config.stream=s --set config.sink.catalog.type=sql --set persistence.enabled=true --set replicaCount=2
check "helm template (SQLite, one replica, persistence)" "$HELM" template dms2iceberg "$CHART" "${KUBE[@]}" \
  --set config.stream=s --set config.sink.catalog.type=sql --set persistence.enabled=true

check "cfn-lint docs/deploy/cloudformation.yaml" "$CFN_LINT" docs/deploy/cloudformation.yaml

check "promtool check rules docs/deploy/alerts.yaml" "$PROMTOOL" check rules docs/deploy/alerts.yaml
check "promtool test rules docs/deploy/alerts_test.yaml" "$PROMTOOL" test rules docs/deploy/alerts_test.yaml

for f in docs/deploy/*.json docs/examples/*.json; do
  check "json $f" python3 -m json.tool "$f"
done
for f in docs/examples/*.yaml docs/deploy/alerts.yaml docs/deploy/cloudformation.yaml; do
  [ "$f" = docs/deploy/cloudformation.yaml ] && continue # CloudFormation tags (!Ref): cfn-lint parses it
  check "yaml $f" "$PY" -c 'import sys, yaml; yaml.safe_load(open(sys.argv[1]))' "$f"
done

# Every metric used by the alerts and the dashboard is one docs/deploy.md documents (histogram
# series by their base name).
documented_metrics() {
  local used missing=0
  used=$(grep -ohE 'dms2iceberg_[a-z0-9_]+' docs/deploy/alerts.yaml docs/deploy/alerts_test.yaml docs/deploy/grafana-dashboard.json |
    sed -E 's/_(bucket|sum|count)$//' | sort -u)
  for m in $used; do
    grep -qF "\`$m\`" docs/deploy.md || { echo "$m is used but not documented in docs/deploy.md"; missing=1; }
  done
  return $missing
}
check "alerts and dashboard use documented metrics" documented_metrics

if [ ${#failed[@]} -gt 0 ]; then
  echo "validate-deploy: ${#failed[@]} check(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "validate-deploy: all checks passed"
