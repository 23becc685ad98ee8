"""Compact Iceberg tables with Spark in a loop while dms2iceberg writes them, for
integration/spark_test.go (TestSparkCompactsBesideLiveCDC).

usage: python rewrite_loop.py --jars A.jar,B.jar --catalog NAME [--conf KEY=VALUE ...]
                              --table NS.TABLE ... --stop FILE --out FILE [--max-seconds N]

It starts a local Spark (local[2]) with the Iceberg runtime and SQL extensions, configures one
Iceberg catalog NAME with the given catalog properties, and calls
CALL NAME.system.rewrite_data_files(table => ..., options => map('rewrite-all', 'true')) on each
table in turn, as a user's scheduled compaction job would, until FILE exists and every table
had at least one rewrite that landed (or --max-seconds passed). Each call appends one JSON line
to --out:

    {"table": "ns.t", "ok": true, "rewritten": 12, "added": 1, "seconds": 3.1}
    {"table": "ns.t", "ok": false, "error": "...", "seconds": 2.0}

Iceberg's own commit retries (commit.retry.num-retries, default 4) handle a lost race inside a
call; every lost race shows in the log as a CommitFailedException, which the test counts.
"""

import json
import os
import sys
import time

import session


def main():
    ap = session.parser()
    ap.add_argument("--stop", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-seconds", type=float, default=600)
    args = ap.parse_args()

    spark = session.build("dms2iceberg-spark-rewrite", args.jars, args.catalog, args.conf, extensions=True)
    print("spark %s" % spark.version, file=sys.stderr)

    landed = {t: 0 for t in args.table}
    start = time.time()
    with open(args.out, "w") as out:
        while True:
            stop = os.path.exists(args.stop)
            if stop and all(landed.values()):
                break
            if time.time() - start > args.max_seconds:
                print("rewrite: giving up after %.0fs" % (time.time() - start), file=sys.stderr)
                break
            for t in args.table:
                t0 = time.time()
                try:
                    row = spark.sql(
                        "CALL %s.system.rewrite_data_files(table => '%s', options => map('rewrite-all', 'true'))"
                        % (args.catalog, t)
                    ).collect()[0]
                    res = {"table": t, "ok": True, "rewritten": row[0], "added": row[1]}
                    landed[t] += 1
                except Exception as e:  # reported per call; the test decides
                    msg = str(getattr(e, "java_exception", None) or e) or type(e).__name__
                    res = {"table": t, "ok": False, "error": msg.strip().splitlines()[0]}
                res["seconds"] = round(time.time() - t0, 3)
                print("rewrite %s" % json.dumps(res), file=sys.stderr)
                out.write(json.dumps(res) + "\n")
                out.flush()
            time.sleep(0.5)
    spark.stop()


if __name__ == "__main__":
    main()
