#!/usr/bin/env bash
# Install the pinned developer tools into <repo>/.emu/bin (or $EMU_DIR/bin).
# Go tools are built with go install through the Go module proxy; cfn-lint comes from PyPI into a
# venv under $EMU_DIR/cfn-venv and is linked into the bin directory.
# usage: .ci/tools.sh [install|deploy|all|path]
#   install (default)  golangci-lint and gotestsum; idempotent; prints one line per tool it actually
#                      installs, nothing otherwise
#   deploy             helm, promtool and cfn-lint (what .ci/validate-deploy.sh runs); same contract
#   all                both
#   path               print the bin directory (for PATH="$(.ci/tools.sh path):$PATH")
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
EMU_DIR=${EMU_DIR:-"$ROOT/.emu"}
BIN="$EMU_DIR/bin"
LOGS="$EMU_DIR/logs"

# Pinned versions. golangci-lint v2 is built from source with the local Go toolchain, so it always
# understands the Go version in go.mod (a prebuilt release built with an older Go would refuse it).
GOLANGCI_LINT_VERSION=v2.15.0
GOTESTSUM_VERSION=v1.13.0   # runs go test with readable output and a JSON record to count tests
# Deployment artifact checks (.ci/validate-deploy.sh). helm and promtool are built from their Go
# modules (a release binary download is not possible everywhere CI runs). Prometheus tags its Go
# module v0.<major*100+minor>.<patch>: v0.316.0 is Prometheus 3.16.0.
HELM_VERSION=v3.22.0
PROMETHEUS_MODULE_VERSION=v0.316.0
CFN_LINT_VERSION=1.58.0

t() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(t)" 'BEGIN{printf "%.1f", b-a}'; }

# go_tool NAME MODULE_PATH VERSION [VERSION_CMD...]: go install MODULE_PATH@VERSION into $BIN unless
# "$BIN/NAME VERSION_CMD" already prints VERSION (without the leading v). Without VERSION_CMD the
# module version recorded in the binary (go version -m) is compared instead: binaries built by
# go install carry no version stamp of their own (helm, promtool).
go_tool() {
  local name=$1 pkg=$2 ver=$3; shift 3
  if [ -x "$BIN/$name" ]; then
    if [ $# -gt 0 ]; then
      "$BIN/$name" "$@" 2>/dev/null | grep -qF "${ver#v}" && return 0
    elif command -v go >/dev/null &&
      go version -m "$BIN/$name" 2>/dev/null | awk '$1 == "mod" { print $3; exit }' | grep -qxF "$ver"; then
      return 0
    fi
  fi
  command -v go >/dev/null || { echo "tools.sh: go is not on PATH" >&2; exit 1; }
  mkdir -p "$BIN" "$LOGS"
  local s; s=$(t)
  if ! GOBIN="$BIN" GOTOOLCHAIN=local GOFLAGS=-modcacherw go install "$pkg@$ver" >"$LOGS/install-$name.log" 2>&1; then
    echo "tools.sh: go install $pkg@$ver failed; log $LOGS/install-$name.log:" >&2
    tail -30 "$LOGS/install-$name.log" >&2
    exit 1
  fi
  echo "install: $name $ver $(since "$s")s"
}

# cfn_lint: pip install cfn-lint==CFN_LINT_VERSION into $EMU_DIR/cfn-venv, linked as $BIN/cfn-lint.
cfn_lint() {
  local venv="$EMU_DIR/cfn-venv"
  if [ -x "$BIN/cfn-lint" ] && "$BIN/cfn-lint" --version 2>/dev/null | grep -qF "$CFN_LINT_VERSION"; then
    return 0
  fi
  command -v python3 >/dev/null || { echo "tools.sh: python3 is not on PATH (Debian: apt-get install python3 python3-venv)" >&2; exit 1; }
  mkdir -p "$BIN" "$LOGS"
  local s; s=$(t)
  { [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"; } >"$LOGS/install-cfn-lint.log" 2>&1 ||
    { tail -20 "$LOGS/install-cfn-lint.log" >&2; echo "tools.sh: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
  "$venv/bin/pip" install --disable-pip-version-check -q "cfn-lint==$CFN_LINT_VERSION" >>"$LOGS/install-cfn-lint.log" 2>&1 ||
    { tail -30 "$LOGS/install-cfn-lint.log" >&2; echo "tools.sh: pip install cfn-lint==$CFN_LINT_VERSION failed" >&2; exit 1; }
  ln -sf "$venv/bin/cfn-lint" "$BIN/cfn-lint"
  echo "install: cfn-lint $CFN_LINT_VERSION $(since "$s")s"
}

install_lint() {
  go_tool golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint "$GOLANGCI_LINT_VERSION" version --short
  go_tool gotestsum gotest.tools/gotestsum "$GOTESTSUM_VERSION" --version
}

install_deploy() {
  go_tool helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION"
  go_tool promtool github.com/prometheus/prometheus/cmd/promtool "$PROMETHEUS_MODULE_VERSION"
  cfn_lint
}

case "${1:-install}" in
  install) install_lint ;;
  deploy) install_deploy ;;
  all) install_lint; install_deploy ;;
  path) echo "$BIN" ;;
  *) echo "usage: $0 [install|deploy|all|path]" >&2; exit 2 ;;
esac
