//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// kvRecord is a DMS CDC update of shop.kv.
func kvRecord(id, v int) []byte {
	return fmt.Appendf(nil, `{"data":{"id":%d,"v":%d},"before-image":{},"metadata":{"timestamp":"2025-06-01T00:00:00.000000Z","record-type":"data","operation":"update","partition-key-type":"schema-table","schema-name":"shop","table-name":"kv","transaction-id":%d}}`, id, v, v)
}

func putKV(t *testing.T, stream string, from, to int) {
	t.Helper()
	kc := Kinesis(t)
	for v := from; v <= to; v++ {
		if _, err := kc.PutRecord(t.Context(), &kinesis.PutRecordInput{StreamName: aws.String(stream),
			PartitionKey: aws.String("shop.kv"), Data: kvRecord(1, v)}); err != nil {
			t.Fatal(err)
		}
	}
}

func waitStreamActive(t *testing.T, stream string) {
	t.Helper()
	w := kinesis.NewStreamExistsWaiter(Kinesis(t), func(o *kinesis.StreamExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 500*time.Millisecond
	})
	if err := w.Wait(t.Context(), &kinesis.DescribeStreamInput{StreamName: aws.String(stream)}, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// splitInHalf splits sh at the middle of its hash-key range and returns its id.
func splitInHalf(t *testing.T, stream string, sh ktypes.Shard) string {
	t.Helper()
	lo, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
	hi, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.EndingHashKey), 10)
	if err := splitShard(t.Context(), Kinesis(t), stream, aws.ToString(sh.ShardId), lo, hi); err != nil {
		t.Fatal(err)
	}
	return aws.ToString(sh.ShardId)
}

// holdLease makes a dead worker hold a shard's lease until `until`, as after a crash.
func holdLease(t *testing.T, app, shard string, until time.Time) {
	t.Helper()
	_, err := DynamoDB(t).PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(app), Item: map[string]ddbtypes.AttributeValue{
		checkpoint.AttrShardID:      &ddbtypes.AttributeValueMemberS{Value: shard},
		checkpoint.AttrAssignedTo:   &ddbtypes.AttributeValueMemberS{Value: "dead-worker"},
		checkpoint.AttrLeaseTimeout: &ddbtypes.AttributeValueMemberS{Value: until.UTC().Format(time.RFC3339Nano)},
		checkpoint.AttrLeaseEpoch:   &ddbtypes.AttributeValueMemberN{Value: "1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func kvValue(t *testing.T, cfgPath, dataDir string) (string, int) {
	t.Helper()
	cat, err := sink.OpenCatalog(context.Background(), sink.DefaultCatalogConfig(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(context.Background(), table.Identifier{"shop", "kv"})
	if err != nil {
		return "", 0
	}
	_, it, err := tbl.Scan().ToArrowRecords(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	v, rows := "", 0
	vt := tbl.Schema().Field(1).Type
	for rec, err := range it {
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			v, _ = dms.RenderArrow(rec.Column(1), i, vt)
			rows++
		}
		rec.Release()
	}
	return v, rows
}

// reshardCase writes the first half of a key's history to the parent(s), reshards, writes the
// second half to the child, lets a dead worker hold the parent lease(s), and checks that the
// final value is the child's, i.e. the parents were committed before the child.
func reshardCase(t *testing.T, merge bool) {
	RequireEmulators(t)
	bin := BuildBinary(t)
	stream := UniqueName(t.Name())
	app := "dms2iceberg-" + stream
	shards := int32(1)
	if merge {
		shards = 2
	}
	CreateStream(t, stream, shards)
	t.Cleanup(func() { DeleteTable(t, app) })
	kc := Kinesis(t)
	list, err := kc.ListShards(t.Context(), &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	putKV(t, stream, 1, 30) // all on the shard "shop.kv" hashes to
	var parents []string
	if merge {
		a, b := list.Shards[0], list.Shards[1]
		if _, err := kc.MergeShards(t.Context(), &kinesis.MergeShardsInput{StreamName: aws.String(stream),
			ShardToMerge: a.ShardId, AdjacentShardToMerge: b.ShardId}); err != nil {
			t.Fatal(err)
		}
		parents = []string{aws.ToString(a.ShardId), aws.ToString(b.ShardId)}
	} else {
		parents = []string{splitInHalf(t, stream, list.Shards[0])}
	}
	waitStreamActive(t, stream)
	putKV(t, stream, 31, 60) // on a child

	// The lease table exists before the service starts, with the parents held by a dead worker
	// for a while: the children are leased first.
	_, err = DynamoDB(t).CreateTable(t.Context(), &dynamodb.CreateTableInput{
		TableName:            aws.String(app),
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String(checkpoint.AttrShardID), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String(checkpoint.AttrShardID), KeyType: ddbtypes.KeyTypeHash}},
		BillingMode:          ddbtypes.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	holdUntil := time.Now().Add(12 * time.Second)
	for _, p := range parents {
		holdLease(t, app, p, holdUntil)
	}
	if merge {
		// The merge case of E7: the parent without records is already finished, the one with
		// the key's history is held by the dead worker. The KCL waits only for ParentShardId.
		empty := parents[0]
		if hasRecords(t, stream, empty) {
			empty = parents[1]
		}
		_, err := DynamoDB(t).PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(app), Item: map[string]ddbtypes.AttributeValue{
			checkpoint.AttrShardID: &ddbtypes.AttributeValueMemberS{Value: empty}, checkpoint.AttrCheckpoint: &ddbtypes.AttributeValueMemberS{Value: checkpoint.ShardEnd},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}

	dataDir := t.TempDir()
	cfg := fmt.Sprintf(`stream: %s
data_dir: %s
consumer: {shard_sync: 500ms, failover: 6s, idle_between_reads: 200ms}
sink:
  flush_interval: 300ms
  tables:
    shop.kv:
      primary_key: [id]
      columns: [{name: id, type: INT4}, {name: v, type: INT4}]
`, stream, dataDir)
	cfgPath := filepath.Join(dataDir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	svc := StartService(t, bin, cfgPath)
	want := "60"
	WaitFor(t, 3*time.Minute, time.Second, func() (bool, error) {
		if svc.Exited() {
			return false, fmt.Errorf("service exited:\n%s", tailFile(svc.LogPath, 8<<10))
		}
		v, rows := kvValue(t, cfgPath, dataDir)
		if rows > 1 {
			return false, fmt.Errorf("key 1 has %d rows", rows)
		}
		return v == want && time.Now().After(holdUntil.Add(8*time.Second)), nil
	}, "the child's last value to win after the parents finished")
	if err := svc.Stop(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	if v, rows := kvValue(t, cfgPath, dataDir); v != want || rows != 1 {
		t.Fatalf("final value %q (%d rows), want %s: a parent's older record was committed after the child's", v, rows, want)
	}
}

// §11 item 6 (E3): after a split, the KCL can process the child before its parent; a parent held
// by a dead worker makes that certain. The parent's older records must not overwrite the child's.
func TestGuardSplitChildWaitsForParent(t *testing.T) { reshardCase(t, false) }

// §11 item 6 (E4, E7): after a merge, the KCL ignores AdjacentParentShardId.
func TestGuardMergeChildWaitsForBothParents(t *testing.T) { reshardCase(t, true) }

func hasRecords(t *testing.T, stream, shard string) bool {
	t.Helper()
	kc := Kinesis(t)
	it, err := kc.GetShardIterator(t.Context(), &kinesis.GetShardIteratorInput{StreamName: aws.String(stream),
		ShardId: aws.String(shard), ShardIteratorType: "TRIM_HORIZON"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := kc.GetRecords(t.Context(), &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Records) > 0
}

// A graceful stop while the KCL's consumer of a child shard waits for its parent (held by a
// dead worker) finishes within the shutdown timeout: the KCL's wait for the parent looks at no
// stop channel, so the KCL's checkpointer ends it once the stop begins. Before, Worker.Shutdown
// waited on that consumer until shutdown_timeout and the child's lease was held until it expired.
func TestStopWhileAChildShardWaitsForItsParent(t *testing.T) {
	RequireEmulators(t)
	bin := BuildBinary(t)
	stream := UniqueName(t.Name())
	app := "dms2iceberg-" + stream
	CreateStream(t, stream, 1)
	t.Cleanup(func() { DeleteTable(t, app) })
	kc := Kinesis(t)
	list, err := kc.ListShards(t.Context(), &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	putKV(t, stream, 1, 5)
	parent := splitInHalf(t, stream, list.Shards[0])
	waitStreamActive(t, stream)
	// A live worker reads the parent (a checkpoint, not SHARD_END) and never finishes it here: the
	// KCL's consumer of each child polls the parent's row until the stop. (A parent row without a
	// checkpoint ends the child's consumer at once with ErrSequenceIDNotFound instead.)
	ordHoldLease(t, app, parent, time.Now().Add(10*time.Minute))
	if _, err := DynamoDB(t).UpdateItem(t.Context(), &dynamodb.UpdateItemInput{TableName: aws.String(app),
		Key:              map[string]ddbtypes.AttributeValue{checkpoint.AttrShardID: &ddbtypes.AttributeValueMemberS{Value: parent}},
		UpdateExpression: aws.String("SET #c = :c"), ExpressionAttributeNames: map[string]string{"#c": checkpoint.AttrCheckpoint},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":c": &ddbtypes.AttributeValueMemberS{Value: "49000000000000000000000000000000000000000000000000000000"}},
	}); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	cfg := fmt.Sprintf("stream: %s\ndata_dir: %s\nshutdown_timeout: 20s\nconsumer: {failover: 6s}\n", stream, dataDir)
	cfgPath := filepath.Join(dataDir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	svc := StartService(t, bin, cfgPath)
	WaitFor(t, 2*time.Minute, 250*time.Millisecond, func() (bool, error) {
		if svc.Exited() {
			return false, fmt.Errorf("service exited:\n%s", tailFile(svc.LogPath, 8<<10))
		}
		children := 0
		for shard, l := range ordLeases(t, app) {
			if shard != parent && l.owner != "" && l.owner != "dead-worker" {
				children++
			}
		}
		return children == 2, nil
	}, "the service to take both children's leases (their consumers then wait for the parent)")
	time.Sleep(2 * time.Second) // the consumers are past their first poll of the parent's row
	if err := svc.Stop(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	log := svc.Log()
	if strings.Contains(log, "worker did not stop within the shutdown timeout") || !strings.Contains(log, "worker stopped") {
		t.Fatalf("the KCL worker did not stop while the children waited for their parent:\n%s", tailFile(svc.LogPath, 8<<10))
	}
	for shard, l := range ordLeases(t, app) {
		if shard != parent && l.owner != "" {
			t.Fatalf("child %s still leased to %s after a graceful stop", shard, l.owner)
		}
	}
}
