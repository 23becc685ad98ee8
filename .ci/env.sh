# Sourced by the .ci scripts (not executable on its own): sets ROOT and EMU_DIR, makes sure a Go
# toolchain and the pinned tools are on PATH, and gives Go and npm a usable home even when the
# caller's environment is thin (CI runs as root with part of the environment removed).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
EMU_DIR=${EMU_DIR:-"$ROOT/.emu"}
export EMU_DIR
if [ -z "${HOME:-}" ]; then
  HOME=$(getent passwd "$(id -u)" | cut -d: -f6); export HOME
fi
# Go lives in /usr/local/go/bin on these machines; keep any Go already first on PATH.
command -v go >/dev/null 2>&1 || PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null 2>&1 || { echo "no Go toolchain on PATH (looked in /usr/local/go/bin too)" >&2; exit 1; }
# System tools (runuser for PostgreSQL, ...) live in sbin, which a thin PATH may lack.
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH="$PATH:/usr/sbin:/sbin" ;; esac
export PATH="$EMU_DIR/bin:$PATH"
# Use the installed toolchain as it is (go.mod's go line matches it); never download another.
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
# VCS stamping needs git to trust the checkout; the binary does not need the stamp.
export GOFLAGS=${GOFLAGS:--buildvcs=false}
