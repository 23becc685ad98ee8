"""Read Iceberg tables with PyIceberg and dump their rows as JSON lines, for integration tests.

usage: python read_tables.py --name NAME [--conf KEY=VALUE ...] [--ref BRANCH] --table NS.TABLE[:COL,COL...] ... --out FILE

It loads the catalog NAME with the given PyIceberg catalog properties (type, uri, warehouse, ...),
scans each table (selecting the given columns, default all) to Arrow, and writes one JSON object
per table to FILE, in the format of integration/spark/read_tables.py (so that the Go side
compares both readers' rows the same way):

    {"table": "ns.t", "columns": [...], "spark_types": [...arrow types...], "rows": [[v, ...], ...]}
    {"table": "ns.t", "error": "..."}          when PyIceberg cannot read the table

With --ref it reads the snapshot the branch or tag points at (a table without it is an error) and
adds "snapshot_id" to the table's object.

Values are JSON null or strings: integers in decimal; decimals in plain notation with the
column's scale; floats and doubles as Python's repr; booleans as true/false; dates as days since
1970-01-01; timestamps as microseconds since 1970-01-01T00:00:00 UTC; binary as lower-case hex;
strings as they are.
"""

import argparse
import json
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyiceberg
from pyiceberg.catalog import load_catalog


def encode_column(col):
    """Returns the column's values as JSON strings (or None)."""
    t = col.type
    if pa.types.is_timestamp(t):
        if t.unit != "us":
            col = pc.cast(col, pa.timestamp("us", tz=t.tz))
        return [None if v is None else str(v) for v in pc.cast(col, pa.int64()).to_pylist()]
    if pa.types.is_date32(t):
        return [None if v is None else str(v) for v in pc.cast(col, pa.int32()).to_pylist()]
    vals = col.to_pylist()
    if pa.types.is_integer(t):
        enc = str
    elif pa.types.is_boolean(t):
        enc = lambda v: "true" if v else "false"  # noqa: E731
    elif pa.types.is_decimal(t):
        enc = lambda v: format(v, "f")  # noqa: E731
    elif pa.types.is_floating(t):
        enc = repr
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        enc = lambda v: v  # noqa: E731
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        enc = lambda v: bytes(v).hex()  # noqa: E731
    elif str(t).startswith("extension<arrow.uuid"):
        enc = lambda v: v.bytes.hex() if hasattr(v, "bytes") else bytes(v).hex()  # noqa: E731
    else:
        raise ValueError("no encoding for Arrow type %s" % t)
    return [None if v is None else enc(v) for v in vals]


def read_table(cat, spec, ref=None):
    name, _, cols = spec.partition(":")
    tbl = cat.load_table(name)
    fields = tuple(cols.split(",")) if cols else ("*",)
    snapshot_id = None
    if ref:
        snap = tbl.snapshot_by_name(ref)
        if snap is None:
            raise LookupError("no ref %s" % ref)
        snapshot_id = snap.snapshot_id
    at = tbl.scan(selected_fields=fields, snapshot_id=snapshot_id).to_arrow()
    if cols:
        at = at.select(cols.split(","))
    columns = [encode_column(at.column(i).combine_chunks()) for i in range(at.num_columns)]
    rows = [list(r) for r in zip(*columns)] if columns else []
    out = {
        "table": name,
        "columns": at.column_names,
        "spark_types": [str(f.type) for f in at.schema],
        "rows": rows,
    }
    if snapshot_id is not None:
        out["snapshot_id"] = snapshot_id
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--conf", action="append", default=[])
    ap.add_argument("--table", action="append", default=[])
    ap.add_argument("--out", required=True)
    ap.add_argument("--ref", default=None)
    args = ap.parse_args()
    props = dict(kv.split("=", 1) for kv in args.conf)
    cat = load_catalog(args.name, **props)
    print("pyiceberg %s, pyarrow %s" % (pyiceberg.__version__, pa.__version__), file=sys.stderr)
    with open(args.out, "w") as out:
        for spec in args.table:
            start = time.time()
            try:
                res = read_table(cat, spec, args.ref)
                print("read %s: %d rows in %.2fs" % (res["table"], len(res["rows"]), time.time() - start), file=sys.stderr)
            except Exception as e:  # reported per table; the test decides
                msg = (str(e) or type(e).__name__).strip().splitlines()[0]
                res = {"table": spec.partition(":")[0], "error": "%s: %s" % (type(e).__name__, msg)}
                print("read %s: %s" % (res["table"], res["error"]), file=sys.stderr)
            out.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
