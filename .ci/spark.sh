#!/usr/bin/env bash
# Install pyspark and the Iceberg Spark runtime for the Spark interop test (integration/spark_test.go).
#
# usage: .ci/spark.sh install|install-pyiceberg|env|status
#   install  idempotent, quiet: prints one line per thing it actually installs, nothing otherwise.
#            pyspark into a venv under $EMU_DIR/spark-venv (PyPI); the jars of .ci/spark/pom.xml
#            into $EMU_DIR/spark/jars (Maven Central); pyiceberg into $EMU_DIR/pyiceberg-venv (PyPI,
#            the reader test of delete modes). Needs python3 (with venv), java and mvn.
#   env      prints the export lines the test reads:  eval "$(.ci/spark.sh env)"
#   status   exit 0 if everything is installed at the pinned versions
# Nothing runs in the background: the test starts a local Spark (local[2]) for each read.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
EMU_DIR=${EMU_DIR:-"$ROOT/.emu"}
mkdir -p "$EMU_DIR"
EMU_DIR=$(cd "$EMU_DIR" && pwd)

# Pinned versions. The Iceberg runtime must match pyspark's Spark minor version (3.5) and Scala
# version (2.12); keep ICEBERG_SPARK_VERSION in step with .ci/spark/pom.xml.
SPARK_VERSION=3.5.9            # PyPI pyspark
ICEBERG_SPARK_VERSION=1.12.0   # Maven org.apache.iceberg:iceberg-spark-runtime-3.5_2.12
JAVA_APT_PACKAGE=openjdk-17-jre-headless
PYICEBERG_VERSION=0.12.0       # PyPI pyiceberg, the reader test of delete modes (integration/pyiceberg_test.go)

VENV="$EMU_DIR/spark-venv"
PYI_VENV="$EMU_DIR/pyiceberg-venv"
POM="$ROOT/.ci/spark/pom.xml"
JARS="$EMU_DIR/spark/jars"
LOGS="$EMU_DIR/logs"

die() { echo "spark.sh: $*" >&2; exit 1; }
t() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(t)" 'BEGIN{printf "%.1f", b-a}'; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
  die "need root (or sudo) to run: $*"; fi; }
apt_install() {
  local s; s=$(t)
  mkdir -p "$LOGS"
  command -v apt-get >/dev/null || die "$* missing and apt-get is not available: install it by hand"
  { as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@"; } \
    >"$LOGS/apt-install-spark.log" 2>&1 || { tail -20 "$LOGS/apt-install-spark.log" >&2; die "apt-get install $* failed"; }
  echo "install: apt $* $(since "$s")s"
}

jars_stamp() { echo "$ICEBERG_SPARK_VERSION $(sha256sum "$POM" | cut -c1-16)"; }
pyiceberg_version() { "$PYI_VENV/bin/python" -c 'import pyiceberg; print(pyiceberg.__version__)' 2>/dev/null || true; }
pyspark_version() { "$VENV/bin/python" -c 'import pyspark; print(pyspark.__version__)' 2>/dev/null || true; }

install_pyiceberg() {
  mkdir -p "$LOGS"
  local s
  command -v python3 >/dev/null || apt_install python3 python3-venv
  if [ "$(pyiceberg_version)" != "$PYICEBERG_VERSION" ]; then
    s=$(t)
    { [ -x "$PYI_VENV/bin/pip" ] || python3 -m venv "$PYI_VENV"; } >"$LOGS/pip-pyiceberg.log" 2>&1 ||
      { tail -20 "$LOGS/pip-pyiceberg.log" >&2; die "python3 -m venv failed (Debian: apt-get install python3-venv)"; }
    "$PYI_VENV/bin/pip" install --disable-pip-version-check -q "pyiceberg[pyarrow,sql-sqlite,sql-postgres,s3fs]==$PYICEBERG_VERSION" \
        >>"$LOGS/pip-pyiceberg.log" 2>&1 ||
      { tail -30 "$LOGS/pip-pyiceberg.log" >&2; die "pip install pyiceberg==$PYICEBERG_VERSION failed (log: $LOGS/pip-pyiceberg.log)"; }
    echo "install: pyiceberg $PYICEBERG_VERSION $(since "$s")s"
  fi
}

install() {
  mkdir -p "$LOGS"
  local s
  install_pyiceberg
  command -v java >/dev/null || apt_install "$JAVA_APT_PACKAGE"
  command -v mvn >/dev/null || apt_install maven
  command -v python3 >/dev/null || apt_install python3 python3-venv
  if [ "$(pyspark_version)" != "$SPARK_VERSION" ]; then
    s=$(t)
    { [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"; } >"$LOGS/pip-spark.log" 2>&1 ||
      { tail -20 "$LOGS/pip-spark.log" >&2; die "python3 -m venv failed (Debian: apt-get install python3-venv)"; }
    "$VENV/bin/pip" install --disable-pip-version-check -q "pyspark==$SPARK_VERSION" >>"$LOGS/pip-spark.log" 2>&1 ||
      { tail -30 "$LOGS/pip-spark.log" >&2; die "pip install pyspark==$SPARK_VERSION failed (log: $LOGS/pip-spark.log)"; }
    echo "install: pyspark $SPARK_VERSION $(since "$s")s"
  fi
  if [ "$(cat "$JARS/.stamp" 2>/dev/null)" != "$(jars_stamp)" ]; then
    s=$(t)
    rm -rf "$JARS"; mkdir -p "$JARS"
    mvn -B -q -f "$POM" -Diceberg.version="$ICEBERG_SPARK_VERSION" dependency:copy-dependencies -DexcludeTransitive=true \
        -DoutputDirectory="$JARS" >"$LOGS/mvn-spark.log" 2>&1 ||
      { tail -30 "$LOGS/mvn-spark.log" >&2; die "fetching the Spark jars failed (log: $LOGS/mvn-spark.log)"; }
    ls "$JARS"/iceberg-spark-runtime-*.jar >/dev/null 2>&1 || die "no iceberg-spark-runtime jar in $JARS"
    jars_stamp >"$JARS/.stamp"
    echo "install: Iceberg Spark runtime and AWS bundle $ICEBERG_SPARK_VERSION, JDBC drivers $(since "$s")s"
  fi
}

status() {
  local ok=0
  if [ "$(pyspark_version)" = "$SPARK_VERSION" ]; then echo "pyspark  $SPARK_VERSION in $VENV"; else echo "pyspark  missing (want $SPARK_VERSION)"; ok=1; fi
  if [ "$(pyiceberg_version)" = "$PYICEBERG_VERSION" ]; then echo "pyiceberg $PYICEBERG_VERSION in $PYI_VENV"; else echo "pyiceberg missing (want $PYICEBERG_VERSION)"; ok=1; fi
  if [ "$(cat "$JARS/.stamp" 2>/dev/null)" = "$(jars_stamp)" ]; then echo "jars     $(ls "$JARS"/*.jar | xargs -n1 basename | tr '\n' ' ')"; else echo "jars     missing (want Iceberg $ICEBERG_SPARK_VERSION)"; ok=1; fi
  return $ok
}

env_() {
  local jars; jars=$(ls "$JARS"/*.jar 2>/dev/null | tr '\n' ',' | sed 's/,$//')
  cat <<EOT
export DMS2ICEBERG_IT_SPARK_PYTHON=$VENV/bin/python
export DMS2ICEBERG_IT_PYICEBERG_PYTHON=$PYI_VENV/bin/python
export DMS2ICEBERG_IT_SPARK_JARS=$jars
EOT
}

case "${1:-}" in
  install) install ;;
  install-pyiceberg) install_pyiceberg ;;
  env) env_ ;;
  status) status ;;
  *) echo "usage: $0 install|install-pyiceberg|env|status" >&2; exit 2 ;;
esac
