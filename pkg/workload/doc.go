// Package workload owns the model of a source database whose changes AWS DMS writes to Kinesis:
// it generates the DMS records of a reproducible workload (deterministic from a seed) and the
// state every target table must end in. It does no I/O; `dms2iceberg gen` writes its messages to
// a stream and `dms2iceberg verify` compares the Iceberg tables with its expected state.
//
// # The source database (schema shop)
//
//   - customers (id INT4 pk, name WSTRING(64), email WSTRING(128), balance NUMERIC(12,2),
//     active BOOLEAN, created_at DATETIME): load, insert, update, delete and primary-key changes.
//     In LayoutTable, load and CDC records use partition-key-type schema-table (Kinesis
//     partition key "shop.customers"): an object-mapping rule that keeps every version of a key
//     on one shard, which is what makes primary-key changes safe without a cross-shard ordering
//     guard. Deletes carry the key and nulls, as PostgreSQL with the default replica identity and
//     IncludeNullAndEmpty=true does.
//   - order_items (order_id INT8, line_no INT4 composite pk, sku WSTRING(32), qty INT4,
//     price NUMERIC(10,2), note NCLOB): load, insert, update, delete, never a key change (the key
//     would move between shards). In LayoutTable partition-key-type primary-key for load and CDC
//     (ParallelApply style); partition-key-value and Kinesis partition key
//     "shop.order_items.<order_id>.<line_no>".
//     A note that is and stays NULL is sometimes left out of an update image.
//   - events (event_time DATETIME with 6 fractional digits, kind WSTRING(32), payload NCLOB with
//     JSON text): no primary key (the table-def has none), load and insert only; partition key
//     "shop.events" in every layout.
//   - types (id INT8 pk plus one column per DMS type family: INT1/2/4/8, UINT1/2/4/8 with UINT8
//     values above 2^63, REAL4/REAL8 holding exact multiples of 0.25, NUMERIC(38,10) and
//     NUMERIC(5,0) with negatives, DATE, TIME, DATETIME with 0/3/6 fractional digits, BLOB as
//     0x-prefixed upper-case hex, BOOLEAN as JSON true/false or "t"/"f", WSTRING with non-ASCII
//     and control characters, NCLOB JSON): load, insert, update, delete; in LayoutTable
//     partition key "shop.types".
//
// # The records
//
// Messages come in the order a DMS task with these endpoint settings writes them:
// IncludeControlDetails, IncludePartitionValue, PartitionIncludeSchemaTable, IncludeNullAndEmpty
// (NULL is an explicit null), UseLargeIntegerValue, BeforeImageSettings{FieldName: before-image,
// ColumnFilter: pk-only}. First create-table control records (partition-key-type task-id,
// partition-key-value = the task id, Kinesis partition key "<task>.shop.<table>") for DMS's own
// awsdms_apply_exceptions table (schema-name "", Kinesis partition key "<task>") and for the four
// tables; then the full load (operation load, no transaction fields), interleaved between
// tables; then CDC records grouped in transactions of one to four records, each with a
// transaction-id, and for about half of the transactions the IncludeTransactionDetails fields
// (transaction-record-id, prev-transaction-id, prev-transaction-record-id, commit-timestamp,
// stream-position). Every update carries a before-image: {} when the key did not change,
// {"id": <old>} when it did (with Config.FullBeforeImages, MySQL's ColumnFilter all: the old
// row's every column, in both cases). Each record is printed at random as MessageFormat json (DMS's
// cJSON formatting: tabs) or json-unformatted (one line plus a newline). NUMERIC values appear
// with all scale digits, with trailing zeros trimmed, or padded to six fractional digits.
//
// With Config.PartialUpdates, CDC updates of the keyed tables are written as Oracle without ALL
// COLUMNS supplemental logging writes them: data holds the key columns and only the columns the
// update changed (a column set to NULL is an explicit null; an update that changed nothing
// carries the key alone). The before-image stays as above. Inserts, loads and deletes, the
// sequence of operations, every value and the expected state are those of the same Config
// without it; the service matches the expected state only if an absent column keeps the row's
// previous value (sink.absent_columns keep).
//
// # Partition layouts, a lagging shard, a reload
//
// Config.Layout chooses the partition keys and nothing else (the same Config in another layout
// writes the same operations and values, and has the same expected state): LayoutTable as
// above; LayoutDMSDefault as DMS without object mapping or ParallelApply (load records of keyed
// tables by primary key, every CDC record by "shop.<table>", control records by the task);
// LayoutPrimaryKey as ParallelApply (every data record of a keyed table by primary key, so a
// customers key change goes under its new key while the old key's records sit on another
// shard). In every layout a primary-key partitioned record carries partition-key-value equal to
// its Kinesis partition key "shop.<table>.<key parts joined by .>", and the initial
// create-table records go by "<TaskId>.shop.<table>" ("<TaskId>" for awsdms_apply_exceptions,
// dms-format.md §1.1); control records written during CDC (schema changes, a reload) go by
// "shop.<table>" in LayoutTable and by "<TaskId>.shop.<table>" otherwise. Every control record
// has partition-key-type task-id and partition-key-value the task id.
//
// DelayShard wraps any message sequence so that the records whose partition key hashes (MD5,
// as Kinesis does) into one shard's HashRange arrive Lag.Delay late; EvenHashRanges gives the
// ranges of a fresh stream of n shards, ParseHashRange those ListShards reports.
//
// Config.Reload reloads one table mid-stream after an outage (see Reload): rows deleted and
// updated at the source without records, a newer create-table, load records of the table's
// current rows between other tables' CDC, then the table's CDC again. The expected state is
// what the source holds: rows deleted during the outage are not in it.
//
// Config.Resends sends some inserts of the keyless table again, byte for byte, a few records
// later, as DMS does on a PutRecords retry or a task restart: the copy reaches the stream under a
// new sequence number and the expected state keeps one row (Message.Resend marks the copies).
//
// # The expected-state file
//
// Expected.Encode writes JSON with one line per table header and one line per row
// (DecodeExpected reads any JSON layout):
//
//	{"version":1,"seed":1,"load_rows":1000,"changes":20000,"timestamptz":false,"tables":[
//	{"source":"shop.customers","namespace":"shop","name":"customers","key":["id"],
//	 "columns":[{"name":"id","type":"int"},...,{"name":"balance","type":"decimal(12, 2)"},...],"rows":[
//	["1","Fatima 田中","user1.507@example.org","7.05","true","2011-05-13T21:10:44.399074"],
//	["7","Zoë Rossi",null,null,"false",null]]},
//	{"source":"shop.events",...,"key":[],...}]}
//
// (The table header is a single line; it is wrapped above.) version is 1. Per table: source is
// the DMS "schema.table"; namespace and name the Iceberg table under the sink's default naming
// (verify applies sink.namespace and sink.tables overrides of the service configuration); key
// the primary-key columns, empty for a keyless table; columns in table-def order with
// iceberg.Type.String() of dms.IcebergType for the table-def column; rows one array per row,
// aligned with columns, holding dms.Render(t, dms.Convert(t, v)) of the value last written for
// each column, or null. Keyed tables are sorted by key and compare by key; keyless tables are
// sorted by their text and compare as a multiset. timestamptz records the DATETIME mapping the
// file was rendered for (sink.timestamptz must match).
//
// # Concurrency
//
// A Generator is immutable and safe for concurrent use; every Messages, Stream or Expected call
// runs its own model, and the sequences it yields are not safe for concurrent iteration.
// DelayShard starts no goroutine: it holds back records in a bounded queue (Lag.MaxHeld) and
// sleeps, honouring its context, in the goroutine that iterates.
package workload
