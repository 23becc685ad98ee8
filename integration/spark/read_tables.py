"""Read Iceberg tables with Spark and dump their rows as JSON lines, for integration/spark_test.go.

usage: python read_tables.py --jars A.jar,B.jar --catalog NAME [--conf KEY=VALUE ...]
                             --table NS.TABLE[@SNAPSHOT_ID|@REF][:COL,COL...] ... --out FILE

It starts a local Spark (local[2]) with the Iceberg runtime, configures one Iceberg catalog NAME
(org.apache.iceberg.spark.SparkCatalog) with the given catalog properties (type, uri, warehouse,
...), reads each table through it (selecting the given columns, default all; at a snapshot id
or a branch or tag with "@", VERSION AS OF), and writes one JSON object per table (named as
given, "@..." included) to FILE:

    {"table": "ns.t", "columns": [...], "spark_types": [...], "rows": [[v, ...], ...]}
    {"table": "ns.t", "error": "..."}          when Spark cannot read the table

Values are JSON null or strings that keep the exact value, for the test to render in Go with
the same code as `dms2iceberg verify`: integers in decimal; decimals in plain notation with the
column's scale; floats and doubles as Python's repr of the value (exact: a float column's value
is a widened float32); booleans as true/false; dates as days since 1970-01-01; timestamps (with
or without time zone) as microseconds since 1970-01-01T00:00:00 UTC; binary as lower-case hex;
strings as they are.
"""

import datetime
import json
import os
import sys
import time

# PySpark turns a TIMESTAMP (with time zone) into a naive datetime in the Python process's local
# zone: make that zone UTC before pyspark is imported, so the arithmetic below is exact.
os.environ["TZ"] = "UTC"
time.tzset()

import session  # noqa: E402  (after the time zone is set)
from pyspark.sql import types as T  # noqa: E402

EPOCH_DATE = datetime.date(1970, 1, 1)
EPOCH = datetime.datetime(1970, 1, 1)
MICRO = datetime.timedelta(microseconds=1)


def encoder(dt):
    """Returns the function that turns a collected value of Spark type dt into its string."""
    if isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return str
    if isinstance(dt, T.BooleanType):
        return lambda v: "true" if v else "false"
    if isinstance(dt, T.DecimalType):
        return lambda v: format(v, "f")
    if isinstance(dt, (T.FloatType, T.DoubleType)):
        return repr
    if isinstance(dt, T.DateType):
        return lambda v: str((v - EPOCH_DATE).days)
    if isinstance(dt, (T.TimestampType, T.TimestampNTZType)):
        return lambda v: str((v.replace(tzinfo=None) - EPOCH) // MICRO)
    if isinstance(dt, T.StringType):
        return lambda v: v
    if isinstance(dt, T.BinaryType):
        return lambda v: bytes(v).hex()
    raise ValueError("no encoding for Spark type %s" % dt.simpleString())


def read_table(spark, catalog, spec):
    name, _, cols = spec.partition(":")
    table, _, at = name.partition("@")
    if not at:
        df = spark.table("%s.%s" % (catalog, table))
    elif at.isdigit():
        df = spark.sql("SELECT * FROM %s.%s VERSION AS OF %s" % (catalog, table, at))
    else:
        df = spark.sql("SELECT * FROM %s.%s VERSION AS OF '%s'" % (catalog, table, at))
    if cols:
        df = df.select(*cols.split(","))
    fields = df.schema.fields
    enc = [encoder(f.dataType) for f in fields]
    rows = []
    for row in df.collect():
        rows.append([None if v is None else e(v) for e, v in zip(enc, row)])
    return {
        "table": name,
        "columns": [f.name for f in fields],
        "spark_types": [f.dataType.simpleString() for f in fields],
        "rows": rows,
    }


def main():
    ap = session.parser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    spark = session.build("dms2iceberg-spark-read", args.jars, args.catalog, args.conf)
    print("spark %s, %s" % (spark.version, spark.conf.get("spark.jars")), file=sys.stderr)

    with open(args.out, "w") as out:
        for spec in args.table:
            start = time.time()
            try:
                res = read_table(spark, args.catalog, spec)
                print("read %s: %d rows in %.1fs" % (res["table"], len(res["rows"]), time.time() - start), file=sys.stderr)
            except Exception as e:  # reported per table; the test decides
                # A Py4JJavaError's own text starts with "An error occurred while calling ...":
                # the Java exception says what went wrong.
                msg = str(getattr(e, "java_exception", None) or e) or type(e).__name__
                res = {"table": spec.partition(":")[0], "error": msg.strip().splitlines()[0]}
                print("read %s: %s" % (res["table"], res["error"]), file=sys.stderr)
            out.write(json.dumps(res) + "\n")
    spark.stop()


if __name__ == "__main__":
    main()
