"""Time a PyIceberg full scan of a live table against a freshly compacted copy, for benchmarks.

usage: python scan_time.py --catalog-db PATH --warehouse DIR --table NS.TABLE --copy-dir DIR [--reps N] [--ref BRANCH]

It opens the service's embedded SQLite catalog (`make bench-maintenance` runs it with
BENCH_PYICEBERG_PYTHON, once the table's equality deletes are converted), picks the newest
snapshot without equality deletes (PyIceberg does not apply them), or with --ref the snapshot the
branch points at (the positional branch, read while ingestion runs), scans it to Arrow, writes the same rows into a new single-snapshot table in
a catalog of its own under --copy-dir (a freshly compacted copy), and times both scans, best of
--reps, interleaved so that load on the machine disturbs both alike. It prints one JSON object:

    {"snapshot": id, "age_s": ..., "rows": n, "data_files": n, "delete_files": n, "position_deletes": n,
     "scan_s": best, "copy_scan_s": best, "ratio": scan_s / copy_scan_s, "pyiceberg": "0.12.0"}

A snapshot that maintenance expires while it is being read is retried with the next choice.
"""

import argparse
import json
import os
import time

import pyiceberg
from pyiceberg.catalog import load_catalog


def pick_snapshot(tbl, ref=None):
    if ref:
        snap = tbl.snapshot_by_name(ref)
        if snap is None:
            raise SystemExit("no ref %s" % ref)
        return snap
    snaps = sorted(tbl.metadata.snapshots, key=lambda s: s.timestamp_ms, reverse=True)
    for s in snaps:
        summ = s.summary
        if summ is not None and summ.get("total-equality-deletes", "0") == "0":
            return s
    raise SystemExit("no snapshot without equality deletes")


def best_of(reps, fns):
    best = [float("inf")] * len(fns)
    out = [None] * len(fns)
    for _ in range(reps):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            out[i] = fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--catalog-db", required=True)
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--copy-dir", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ref", default=None)
    args = ap.parse_args()

    cat = load_catalog("dms2iceberg", type="sql", uri="sqlite:///" + args.catalog_db,
                       warehouse="file://" + args.warehouse)
    last = None
    for _ in range(5):
        tbl = cat.load_table(args.table)
        snap = pick_snapshot(tbl, args.ref)
        try:
            live = tbl.scan(snapshot_id=snap.snapshot_id).to_arrow()
            break
        except (FileNotFoundError, OSError) as e:  # expired under us: take the next newest
            last = e
    else:
        raise SystemExit("every try hit an expired snapshot: %s" % last)

    os.makedirs(args.copy_dir, exist_ok=True)
    copy_cat = load_catalog("copy", type="sql", uri="sqlite:///" + os.path.join(args.copy_dir, "catalog.db"),
                            warehouse="file://" + args.copy_dir)
    ns = "benchcopy"
    if (ns,) not in copy_cat.list_namespaces():
        copy_cat.create_namespace(ns)
    name = "%s.c%d" % (ns, snap.snapshot_id)
    if copy_cat.table_exists(name):
        copy_cat.drop_table(name)
    cp = copy_cat.create_table(name, schema=live.schema)
    cp.append(live)
    rows = live.num_rows
    del live

    def scan_live():
        return cat.load_table(args.table).scan(snapshot_id=snap.snapshot_id).to_arrow().num_rows

    def scan_copy():
        return copy_cat.load_table(name).scan().to_arrow().num_rows

    (t_live, t_copy), (n_live, n_copy) = best_of(args.reps, [scan_live, scan_copy])
    if n_live != rows or n_copy != rows:
        raise SystemExit("row counts differ: first scan %d, live %d, copy %d" % (rows, n_live, n_copy))
    summ = snap.summary
    print(json.dumps({
        "snapshot": snap.snapshot_id,
        "age_s": round(time.time() - snap.timestamp_ms / 1000, 1),
        "rows": rows,
        "data_files": int(summ.get("total-data-files", "0")),
        "delete_files": int(summ.get("total-delete-files", "0")),
        "position_deletes": int(summ.get("total-position-deletes", "0")),
        "scan_s": round(t_live, 3),
        "copy_scan_s": round(t_copy, 3),
        "ratio": round(t_live / t_copy, 2),
        "pyiceberg": pyiceberg.__version__,
    }))


if __name__ == "__main__":
    main()
