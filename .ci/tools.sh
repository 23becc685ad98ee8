#!/usr/bin/env bash
# Install the pinned developer tools into <repo>/.emu/bin (or $EMU_DIR/bin).
# usage: .ci/tools.sh [install|path]
#   install (default)  idempotent; prints one line per tool it actually installs, nothing otherwise
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

t() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(t)" 'BEGIN{printf "%.1f", b-a}'; }

# go_tool NAME MODULE_PATH VERSION VERSION_CMD...: go install MODULE_PATH@VERSION into $BIN unless
# "$BIN/NAME VERSION_CMD" already prints VERSION (without the leading v).
go_tool() {
  local name=$1 pkg=$2 ver=$3; shift 3
  if [ -x "$BIN/$name" ] && "$BIN/$name" "$@" 2>/dev/null | grep -qF "${ver#v}"; then
    return 0
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

install() {
  go_tool golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint "$GOLANGCI_LINT_VERSION" version --short
  go_tool gotestsum gotest.tools/gotestsum "$GOTESTSUM_VERSION" --version
}

case "${1:-install}" in
  install) install ;;
  path) echo "$BIN" ;;
  *) echo "usage: $0 [install|path]" >&2; exit 2 ;;
esac
