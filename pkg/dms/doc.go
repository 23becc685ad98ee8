// Package dms owns the AWS DMS side of the pipeline: it decodes DMS change records (the JSON
// documents DMS writes to Kinesis or Kafka, see shared/dms-format.md) into change.Event values,
// maps DMS table-def column types to Iceberg types, and converts DMS value text into typed
// Datums that are appended to Arrow builders, encoded as dedupe keys, and rendered as canonical
// text for verification; stored values are read back from Arrow as Datums (DatumAt; DatumView without copying, for keys).
//
// The package is pure: it does no I/O, keeps no global mutable state, and never logs.
//
// Concurrency: a Decoder owns a reusable JSON parser and scratch state and is NOT safe for
// concurrent use; give each goroutine (each shard processor) its own Decoder. Events a Decoder
// produces do not alias its memory: every string in an Event points into a byte arena
// allocated for that event alone, so events may be handed to other goroutines. Config,
// TypeOptions, Datum and all package-level functions (IcebergType, InferType, Convert,
// AppendDatum, AppendKey, Render, RenderArrow, DatumAt, DatumView, ArrowSchema) are safe for concurrent
// use; AppendDatum writes to the builder it is given, which the caller must not share.
package dms
