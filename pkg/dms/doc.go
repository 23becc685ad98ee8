// Package dms owns the AWS DMS side of the pipeline: it decodes DMS change records (the JSON
// documents DMS writes to Kinesis or Kafka, see shared/dms-format.md) into change.Event values,
// maps DMS table-def column types to Iceberg types, and converts DMS value text into typed
// Datums that are appended to Arrow builders, encoded as dedupe keys, and rendered as canonical
// text for verification; stored values are read back from Arrow as Datums (DatumAt; DatumView without copying, for keys).
//
// # Input rules: what is stored exactly and what is dead-lettered
//
// Every value either reaches the table as exactly the source value (up to the documented
// rounding of floats and truncation of sub-microsecond digits) or the record is rejected with a
// reason naming the field, which the sink dead-letters:
//
//   - Strings (Decoder, ErrBadString): every JSON string of a record — values, column names,
//     metadata, table-defs, strings nested in JSON values — must be Unicode text. Bytes that are
//     not UTF-8 (including UTF-8-encoded surrogates) and \u escapes of a surrogate that is not
//     a high+low pair reject the record ("data.name: invalid UTF-8 in a string value",
//     "data.name: lone surrogate escape \ud800 ..."). Escapes JSON does not define (\q, \u12)
//     are ErrSyntax. Valid escapes, surrogate pairs included, are decoded exactly.
//   - NaN and infinities (Decoder, Convert): a bare token in any spelling (NaN, nan, -nan, inf,
//     -Inf, +inf, Infinity, -Infinity) is not a JSON number and rejects the record (ErrSyntax,
//     "data.x: bare NaN/Infinity is not a JSON number ..."). Quoted, the words nan, inf and
//     infinity in any case with an optional sign convert to NaN, +Inf and -Inf in float and
//     double columns, stay text in string columns, and are rejected in integer and decimal
//     columns. shared/dms-format.md records DMS's rendering as unknown; its JSON printer
//     (cJSON) writes null for non-finite numbers, which is stored as NULL.
//   - Float and double (Convert): the decimal text is rounded to the nearest representable
//     value; overflow (beyond the largest finite value) and underflow (a nonzero value that
//     rounds to ±0, such as 1e-400) are rejected, subnormal results are kept. Hex floats and
//     underscores are rejected.
//   - Decimals (Convert): exact or rejected: a nonzero digit beyond the scale (1e-400 in
//     decimal(10,2)) or more digits than the precision.
//   - Timestamps (Convert, ConvertIn with KeyDomain): digits below the microsecond are
//     truncated, except in a primary-key column, where truncating could merge two distinct
//     keys. A timestamp key declaring more than 6 fractional digits (TimestampDigits: scale,
//     TIMESTAMP(9), precision ≤ 9) is a string (KeyType) holding the canonical text, the wall
//     clock (timestamptz: UTC + Z) with exactly those digits, 2024-01-02T03:04:05.1234567; a
//     value with a nonzero digit beyond them is rejected. A timestamp key of undeclared
//     precision (DomainMicros) rejects a value with a nonzero digit below the microsecond
//     ("a primary-key timestamp with digits below a microsecond ...").
//   - Unsigned integers (ConvertIn with ColumnDomain): UINT1/UINT2/UINT4/UINT8 (Parquet-style
//     UINT8/UINT16/UINT32/UINT64) are stored as int, long or decimal(20,0), which hold more
//     than the source type; a value below 0 or above 2^(8·width)−1 (UINT8: 2^64−1) is rejected
//     ("outside the range of the source type UINT8 (0 to 18446744073709551615)"). Convert alone
//     checks only the Iceberg type; callers that know the table-def use ConvertIn.
//   - Operations (Decoder, IsTruncate): a data record's operation must be load, insert, update
//     or delete (ErrUnknownOperation otherwise), except a truncate ("truncate", "truncate-table",
//     "TruncateTable", any case; DMS documents no name for it), which is decoded as the control
//     record it is whether DMS writes it as data or control: Op OpControl, Control.Op as written,
//     no columns. The sink removes every row older than it in one snapshot. Control operations
//     pass through as written; the sink applies create-table, the ALTERs, drop-table and
//     truncate, dead-letters rename-table (which name it carries is undocumented) and logs the
//     rest.
//
// The package is pure: it does no I/O, keeps no global mutable state, and never logs.
//
// Concurrency: a Decoder owns a reusable JSON parser and scratch state and is NOT safe for
// concurrent use; give each goroutine (each shard processor) its own Decoder. Events a Decoder
// produces never see its later writes: every string in an Event points into a byte arena
// allocated for that event alone (Decode), or, with DecodeShared, into the record itself where
// the record's text is the value (escaped strings are copied into a slab the decoder only ever
// appends to, slab.go), and a fresh event's columns are carved from a slab that is never
// written again; so events may be handed to other goroutines. Config,
// TypeOptions, Datum and all package-level functions (IcebergType, InferType, Convert, ConvertIn, ColumnDomain, KeyType, KeyDomain,
// AppendDatum, AppendKey, Render, RenderArrow, DatumAt, DatumView, ArrowSchema) are safe for concurrent
// use; AppendDatum writes to the builder it is given, which the caller must not share.
package dms
