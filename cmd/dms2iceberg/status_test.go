package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/consumer"
	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

func seqN(n int) string { return fmt.Sprintf("4962%052d", n) }

type fakeRecord struct {
	seq     string
	arrival time.Time
}

// readKinesis serves ListShards, GetShardIterator and GetRecords from memory. An iterator is
// "shard|index of the next record".
type readKinesis struct {
	shards  []kintypes.Shard
	records map[string][]fakeRecord
	closed  map[string]bool
	reads   int
	// heartbeats are the sequence numbers of heartbeat records (consumer.heartbeat_interval).
	heartbeats map[string]bool
}

func (f *readKinesis) ListShards(_ context.Context, in *kinesis.ListShardsInput, _ ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	// Two pages, to exercise NextToken.
	if in.NextToken == nil && len(f.shards) > 1 {
		return &kinesis.ListShardsOutput{Shards: f.shards[:1], NextToken: aws.String("p2")}, nil
	}
	if in.NextToken == nil {
		return &kinesis.ListShardsOutput{Shards: f.shards}, nil
	}
	return &kinesis.ListShardsOutput{Shards: f.shards[1:]}, nil
}

func (f *readKinesis) GetShardIterator(_ context.Context, in *kinesis.GetShardIteratorInput, _ ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	shard := aws.ToString(in.ShardId)
	recs, ok := f.records[shard]
	if !ok {
		return nil, fmt.Errorf("no shard %s", shard)
	}
	idx := 0
	switch in.ShardIteratorType {
	case kintypes.ShardIteratorTypeTrimHorizon:
	case kintypes.ShardIteratorTypeAfterSequenceNumber:
		for idx < len(recs) && recs[idx].seq <= aws.ToString(in.StartingSequenceNumber) {
			idx++
		}
	default:
		return nil, fmt.Errorf("unexpected iterator type %s", in.ShardIteratorType)
	}
	return &kinesis.GetShardIteratorOutput{ShardIterator: aws.String(shard + "|" + strconv.Itoa(idx))}, nil
}

func (f *readKinesis) GetRecords(_ context.Context, in *kinesis.GetRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	f.reads++
	shard, idxs, _ := strings.Cut(aws.ToString(in.ShardIterator), "|")
	idx, _ := strconv.Atoi(idxs)
	recs := f.records[shard]
	if idx >= len(recs) {
		out := &kinesis.GetRecordsOutput{MillisBehindLatest: aws.Int64(0)}
		if !f.closed[shard] {
			out.NextShardIterator = in.ShardIterator
		}
		return out, nil
	}
	r := recs[idx]
	rec := kintypes.Record{SequenceNumber: aws.String(r.seq), ApproximateArrivalTimestamp: aws.Time(r.arrival)}
	if f.heartbeats[r.seq] {
		rec.PartitionKey, rec.Data = aws.String(consumer.HeartbeatPartitionKey), []byte(`{"dms2iceberg-heartbeat":{"worker":"w1","at":1}}`)
	}
	return &kinesis.GetRecordsOutput{
		Records:            []kintypes.Record{rec},
		MillisBehindLatest: aws.Int64(int64(len(recs)-idx) * 1000), NextShardIterator: aws.String(shard + "|" + strconv.Itoa(idx+1)),
	}, nil
}

type leaseScan struct {
	items []map[string]ddbtypes.AttributeValue
}

func (f *leaseScan) Scan(_ context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	// One item per page, to exercise LastEvaluatedKey.
	i := 0
	if in.ExclusiveStartKey != nil {
		i, _ = strconv.Atoi(in.ExclusiveStartKey["i"].(*ddbtypes.AttributeValueMemberN).Value)
	}
	out := &dynamodb.ScanOutput{Items: f.items[i : i+1]}
	if i+1 < len(f.items) {
		out.LastEvaluatedKey = map[string]ddbtypes.AttributeValue{"i": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(i + 1)}}
	}
	return out, nil
}

func lease(shard, owner, cp string, timeout time.Time, epoch int) map[string]ddbtypes.AttributeValue {
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	return map[string]ddbtypes.AttributeValue{"ShardID": s(shard), "AssignedTo": s(owner), "Checkpoint": s(cp),
		"LeaseTimeout": s(timeout.Format(time.RFC3339Nano)), "LeaseEpoch": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(epoch)}}
}

// statusCatalog creates, in an embedded catalog under dir: shop.orders with two commits and
// watermarks of stream s, shop.other without watermarks, and shop.items (configured) without
// any snapshot.
func statusCatalog(t *testing.T, dir string) catalog.Catalog {
	t.Helper()
	ctx := t.Context()
	cat, sc := shopCatalog(t, dir)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	appendRows := func(tbl *table.Table, ids ...int64) *table.Table {
		asc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
		b := array.NewRecordBuilder(mem, asc)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).AppendValues(ids, nil)
		rec := b.NewRecordBatch()
		defer rec.Release()
		rdr, err := array.NewRecordReader(asc, []arrow.RecordBatch{rec})
		if err != nil {
			t.Fatal(err)
		}
		defer rdr.Release()
		tbl, err = tbl.Append(ctx, rdr, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tbl
	}
	orders, err := cat.CreateTable(ctx, table.Identifier{"shop", "orders"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	orders = appendRows(orders, 1, 2)
	orders = appendRows(orders, 3)
	txn := orders.NewTransaction()
	if err := txn.SetProperties(iceberg.Properties{
		tableprop.Watermark("s", "shard-0"):     seqN(2),
		tableprop.Watermark("s", "shard-1"):     seqN(5),
		tableprop.Watermark("other", "shard-0"): seqN(9), // another stream: ignored
		tableprop.CompleteThrough:               "2026-05-01T11:59:30.000Z",
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := cat.CreateTable(ctx, table.Identifier{"shop", "other"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	appendRows(other, 7)
	if _, err := cat.CreateTable(ctx, table.Identifier{"shop", "items"}, sc); err != nil {
		t.Fatal(err)
	}
	return cat
}

// shopCatalog opens an embedded catalog under dir with the namespace shop, closed at the end of
// the test, and returns it with a one-column schema (id, the key).
func shopCatalog(t *testing.T, dir string) (catalog.Catalog, *iceberg.Schema) {
	t.Helper()
	cat, err := sink.OpenCatalog(t.Context(), sink.DefaultCatalogConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := cat.(interface{ Close() error }); ok {
		t.Cleanup(func() { _ = c.Close() })
	}
	if err := cat.CreateNamespace(t.Context(), table.Identifier{"shop"}, nil); err != nil {
		t.Fatal(err)
	}
	return cat, iceberg.NewSchemaWithIdentifiers(0, []int{1}, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
}

func TestStatusCollectAndRender(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	kc := &readKinesis{
		shards: []kintypes.Shard{
			{ShardId: aws.String("shard-0"), SequenceNumberRange: &kintypes.SequenceNumberRange{StartingSequenceNumber: aws.String(seqN(0))}},
			{ShardId: aws.String("shard-1"), SequenceNumberRange: &kintypes.SequenceNumberRange{StartingSequenceNumber: aws.String(seqN(0)), EndingSequenceNumber: aws.String(seqN(9))}},
			{ShardId: aws.String("shard-2"), ParentShardId: aws.String("shard-1"), SequenceNumberRange: &kintypes.SequenceNumberRange{StartingSequenceNumber: aws.String(seqN(10))}},
		},
		records: map[string][]fakeRecord{
			"shard-0": {{seqN(1), now.Add(-time.Minute)}, {seqN(2), now.Add(-50 * time.Second)}, {seqN(3), now.Add(-40 * time.Second)}, {seqN(4), now.Add(-time.Second)}},
			"shard-1": {{seqN(5), now.Add(-2 * time.Hour)}},
			"shard-2": {{seqN(11), now.Add(-5 * time.Second)}},
		},
		closed: map[string]bool{"shard-1": true},
	}
	dd := &leaseScan{items: []map[string]ddbtypes.AttributeValue{
		lease("shard-0", "worker-a", seqN(2), now.Add(20*time.Second), 3),
		lease("shard-1", "", checkpoint.ShardEnd, now.Add(-time.Minute), 1),
		lease("shard-2", "worker-b", "TRIM_HORIZON", now.Add(10*time.Second), 1),
	}}
	cat := statusCatalog(t, t.TempDir())
	sc := sink.DefaultConfig()
	sc.Tables = map[string]sink.TableConfig{"shop.items": {}}
	src := statusSources{stream: "s", leaseTable: "dms2iceberg-s", kinesis: kc, dynamo: dd, catalog: cat,
		namespaces: impliedNamespaces(sc), targets: configuredTargets(sc), now: func() time.Time { return now }}
	rep := src.collect(t.Context())

	if len(rep.Errors) != 0 {
		t.Fatalf("errors: %v", rep.Errors)
	}
	if len(rep.Shards) != 3 {
		t.Fatalf("shards %+v", rep.Shards)
	}
	s0, s1, s2 := rep.Shards[0], rep.Shards[1], rep.Shards[2]
	if s0.Owner != "worker-a" || s0.Checkpoint != seqN(2) || s0.Committed != seqN(2) || s0.LeaseEpoch != 3 || s0.Closed ||
		s0.LagSeconds == nil || *s0.LagSeconds != 40 || s0.LeaseTimeout == nil || !s0.LeaseTimeout.Equal(now.Add(20*time.Second)) {
		t.Errorf("shard-0: %+v", s0)
	}
	if !s1.Closed || s1.Checkpoint != checkpoint.ShardEnd || s1.Committed != seqN(5) || s1.LagSeconds == nil || *s1.LagSeconds != 0 {
		t.Errorf("shard-1: %+v", s1)
	}
	if s2.Owner != "worker-b" || len(s2.Parents) != 1 || s2.Parents[0] != "shard-1" || s2.LagSeconds == nil || *s2.LagSeconds != 5 {
		t.Errorf("shard-2: %+v", s2)
	}
	if rep.MaxLagSeconds == nil || *rep.MaxLagSeconds != 40 {
		t.Errorf("max lag %v", rep.MaxLagSeconds)
	}
	if len(rep.Tables) != 2 || rep.Tables[0].Table != "shop.items" || rep.Tables[1].Table != "shop.orders" {
		t.Fatalf("tables %+v", rep.Tables)
	}
	items, orders := rep.Tables[0], rep.Tables[1]
	if items.LastCommit != nil || items.Rows != 0 {
		t.Errorf("items: %+v", items)
	}
	if orders.Rows != 3 || orders.DataFiles != 2 || orders.DeleteFiles != 0 || orders.SnapshotID == 0 || orders.LastCommit == nil ||
		orders.LastCommitAgeSeconds == nil || len(orders.Watermarks) != 2 || orders.Watermarks["shard-1"] != seqN(5) ||
		orders.CompleteThrough == nil || !orders.CompleteThrough.Equal(now.Add(-30*time.Second)) {
		t.Errorf("orders: %+v", orders)
	}

	var out bytes.Buffer
	rep.render(&out)
	text := out.String()
	for _, want := range []string{
		"stream s, lease table dms2iceberg-s",
		"max shard lag 40s",
		"SHARDS (3)", "TABLES (2)",
		"shard-0  open", "worker-a", "expires in 20s (epoch 3)", "…" + seqN(2)[len(seqN(2))-12:], "40s",
		"shard-1  finished", "expired 1m0s ago",
		"shard-2  open", "worker-b", "TRIM_HORIZON", "5s",
		"shop.items", "never",
		"shop.orders", strconv.FormatInt(orders.SnapshotID, 10), "COMPLETE THROUGH", "2026-05-01T11:59:30.000Z",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered status lacks %q:\n%s", want, text)
		}
	}
	// The JSON form keeps whole sequence numbers and the snapshot id as a string.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	for _, want := range []string{`"checkpoint":"` + seqN(2) + `"`, `"snapshot_id":"` + strconv.FormatInt(orders.SnapshotID, 10) + `"`, `"lag_seconds":40`} {
		if !strings.Contains(js, want) {
			t.Errorf("JSON lacks %s:\n%s", want, js)
		}
	}
}

func TestStatusAllNamespacesAndErrors(t *testing.T) {
	now := time.Now()
	cat := statusCatalog(t, t.TempDir())
	// No namespaces implied: every namespace is listed; shop.items is not a target now.
	src := statusSources{stream: "s", leaseTable: "l", kinesis: &readKinesis{records: map[string][]fakeRecord{}},
		dynamo: errDynamo{}, catalog: cat, targets: map[string]bool{}, now: func() time.Time { return now }}
	rep := src.collect(t.Context())
	if len(rep.Tables) != 1 || rep.Tables[0].Table != "shop.orders" {
		t.Fatalf("tables %+v", rep.Tables)
	}
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0], "read lease table l") {
		t.Fatalf("errors %v", rep.Errors)
	}
	// Shards known only from the watermarks still show, with the lag lookup's error.
	if len(rep.Shards) != 2 || rep.Shards[0].LagError == "" || rep.Shards[0].Committed != seqN(2) {
		t.Fatalf("shards %+v", rep.Shards)
	}
	var out bytes.Buffer
	rep.render(&out)
	if !strings.Contains(out.String(), "error: read lease table l") {
		t.Fatalf("render lacks the error:\n%s", out.String())
	}
}

type errDynamo struct{}

func (errDynamo) Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	return nil, fmt.Errorf("ResourceNotFoundException: no such table")
}

func TestImpliedNamespacesAndTargets(t *testing.T) {
	c := sink.Config{Tables: map[string]sink.TableConfig{"shop.orders": {}, "crm.users": {Namespace: "lake", Name: "people"}}}
	if got := strings.Join(impliedNamespaces(c), ","); got != "lake,shop" {
		t.Fatalf("implied %q", got)
	}
	tg := configuredTargets(c)
	if !tg["shop.orders"] || !tg["lake.people"] || len(tg) != 2 {
		t.Fatalf("targets %v", tg)
	}
	c.Namespace = "dw"
	if got := strings.Join(impliedNamespaces(c), ","); got != "dw,lake" {
		t.Fatalf("implied with sink.namespace %q", got)
	}
	if tg := configuredTargets(c); !tg["dw.orders"] || !tg["lake.people"] {
		t.Fatalf("targets %v", tg)
	}
	if got := impliedNamespaces(sink.Config{}); len(got) != 0 {
		t.Fatalf("implied for an empty config %v", got)
	}
}

func TestStatusDoesNotCreateTheEmbeddedCatalog(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, "stream: s\ndata_dir: "+dir+"/data\n")
	err := runStatus(t.Context(), []string{"--config", cfg})
	if err == nil || !strings.Contains(err.Error(), "has the service run") {
		t.Fatalf("status without a catalog: %v", err)
	}
	if _, err := os.Stat(dir + "/data"); !os.IsNotExist(err) {
		t.Fatalf("status created %s/data (%v)", dir, err)
	}
}

// A reload in progress shows its staged rows and start, in text and JSON.
func TestStatusShowsReloadInProgress(t *testing.T) {
	rep := statusReport{Stream: "s", Tables: []tableStatus{{Table: "shop.customers",
		Reload: &reloadStatus{Since: "2026-05-01T11:00:00.000000Z", Rows: 1234, BeforeSeq: 7}}}}
	var out bytes.Buffer
	rep.render(&out)
	if want := "reload of shop.customers in progress since 2026-05-01T11:00:00.000000Z: 1234 load rows staged"; !strings.Contains(out.String(), want) {
		t.Errorf("rendered status lacks %q:\n%s", want, out.String())
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"reload":{"since":"2026-05-01T11:00:00.000000Z","rows_staged":1234,"replaces_up_to_sequence":7}`; !strings.Contains(string(b), want) {
		t.Errorf("JSON lacks %s:\n%s", want, b)
	}
}

// Heartbeat records after a checkpoint are no change: the lag is the age of the first other
// record after it, and 0 when only heartbeats follow.
func TestStatusLagSkipsHeartbeats(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	kc := &readKinesis{
		records: map[string][]fakeRecord{
			"shard-0": {{seqN(1), now.Add(-time.Minute)}, {seqN(2), now.Add(-50 * time.Second)}, {seqN(3), now.Add(-40 * time.Second)}, {seqN(4), now.Add(-3 * time.Second)}},
			"shard-1": {{seqN(1), now.Add(-time.Minute)}, {seqN(2), now.Add(-50 * time.Second)}},
		},
		heartbeats: map[string]bool{seqN(2): true, seqN(3): true},
	}
	src := statusSources{stream: "s", kinesis: kc, now: func() time.Time { return now }}
	for _, tc := range []struct {
		shard string
		want  float64
	}{{"shard-0", 3}, {"shard-1", 0}} {
		sh := &shardStatus{Shard: tc.shard, Checkpoint: seqN(1)}
		src.lag(t.Context(), sh, now)
		if sh.LagError != "" || sh.LagSeconds == nil || *sh.LagSeconds != tc.want {
			t.Errorf("%s: lag %v (error %q), want %v s", tc.shard, sh.LagSeconds, sh.LagError, tc.want)
		}
	}
}

// A table with a positional branch (delete_mode position and dv) shows which main snapshot the
// branch shows and how far behind main that is: the age of main's first snapshot after it.
func TestStatusShowsPositionalBranch(t *testing.T) {
	ctx := t.Context()
	cat := statusCatalog(t, t.TempDir())
	ident := table.Identifier{"shop", "orders"}
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	snaps := tbl.Metadata().Snapshots()
	if len(snaps) < 2 {
		t.Fatalf("%d snapshots, want 2 appends", len(snaps))
	}
	first, second := snaps[0], snaps[1]
	head := tbl.CurrentSnapshot().SnapshotID
	if ts := tableStatusOf("shop.orders", tbl, "s", "", time.Now()); ts.PositionalBranch != nil {
		t.Fatalf("a table without the branch shows one: %+v", ts.PositionalBranch)
	}
	if _, _, err := cat.CommitTable(ctx, ident,
		[]table.Requirement{table.AssertRefSnapshotID("positional", nil)},
		[]table.Update{table.NewSetSnapshotRefUpdate("positional", first.SnapshotID, table.BranchRef, 0, 0, 0)}); err != nil {
		t.Fatal(err)
	}
	if tbl, err = cat.LoadTable(ctx, ident); err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(second.TimestampMs).Add(90 * time.Second)
	ts := tableStatusOf("shop.orders", tbl, "s", "positional", at)
	b := ts.PositionalBranch
	if b == nil || b.SnapshotID != first.SnapshotID || b.Shows != first.SnapshotID || b.BehindSeconds != 90 || head == first.SnapshotID {
		t.Fatalf("positional branch %+v: want snapshot %d, 90 s behind main (its next snapshot %d)", b, first.SnapshotID, second.SnapshotID)
	}
	rep := statusReport{Stream: "s", Tables: []tableStatus{ts}}
	var out bytes.Buffer
	rep.render(&out)
	if want := fmt.Sprintf(`shop.orders: branch "positional" (for readers that refuse equality deletes) shows snapshot %d, 1m30s behind main`, first.SnapshotID); !strings.Contains(out.String(), want) {
		t.Errorf("rendered status lacks %q:\n%s", want, out.String())
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`"positional_branch":{"name":"positional","snapshot_id":"%d","shows_snapshot_id":"%d","behind_seconds":90}`, first.SnapshotID, first.SnapshotID); !strings.Contains(string(js), want) {
		t.Errorf("JSON lacks %s:\n%s", want, js)
	}
}
