//go:build integration

package integration

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/checkpoint/leasetest"
)

// dynamoLeaseTable is a fresh lease table in DynamoDB Local, for the lease-store contract.
type dynamoLeaseTable struct{ name string }

func (d dynamoLeaseTable) Worker(t *testing.T, worker string) leasetest.Store {
	return leases(t, d.name, worker, time.Hour)
}

// Expire moves the row's lease timeout into the past, as a stalled owner's lease would lapse.
func (d dynamoLeaseTable) Expire(t *testing.T, shard string) {
	t.Helper()
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	_, err := DynamoDB(t).UpdateItem(t.Context(), &dynamodb.UpdateItemInput{TableName: aws.String(d.name),
		Key: checkpoint.LeaseKey(shard), UpdateExpression: aws.String("SET #t = :past"),
		ConditionExpression:       aws.String("attribute_exists(#t)"),
		ExpressionAttributeNames:  map[string]string{"#t": checkpoint.AttrLeaseTimeout},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":past": &ddbtypes.AttributeValueMemberS{Value: past}}})
	if err != nil {
		t.Fatalf("expire the lease of %s: %v", shard, err)
	}
}

// SetStateVersion writes (or removes) the row's state-version stamp.
func (d dynamoLeaseTable) SetStateVersion(t *testing.T, shard, v string) {
	t.Helper()
	in := &dynamodb.UpdateItemInput{TableName: aws.String(d.name), Key: checkpoint.LeaseKey(shard),
		UpdateExpression: aws.String("REMOVE #v"), ExpressionAttributeNames: map[string]string{"#v": checkpoint.AttrStateVersion}}
	if v != "" {
		in.UpdateExpression = aws.String("SET #v = :v")
		in.ExpressionAttributeValues = map[string]ddbtypes.AttributeValue{":v": &ddbtypes.AttributeValueMemberN{Value: v}}
	}
	if _, err := DynamoDB(t).UpdateItem(t.Context(), in); err != nil {
		t.Fatalf("set the state version of %s: %v", shard, err)
	}
}

// TestLeasesKeepTheLeaseContract runs the contract the in-memory store keeps in checkpoint's unit
// tests against checkpoint.Leases over DynamoDB Local: the two stores must not drift apart.
func TestLeasesKeepTheLeaseContract(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) leasetest.Table { return dynamoLeaseTable{name: leaseTable(t)} })
}

// The horizon attributes dms2iceberg adds to lease rows survive releasing a lease
// (RemoveLeaseOwner, an UpdateItem that removes AssignedTo under this worker's epoch): it keeps
// them, so the shard holds the stream watermark at its last published horizon until the next
// owner takes the lease (which removes them).
func TestLeaseReleaseKeepsTheHorizon(t *testing.T) {
	table := leaseTable(t)
	a := leases(t, table, "A", time.Hour)
	const shard = "shardId-000000000000"
	if err := a.GetLease(shardStatus(shard, ""), "A"); err != nil {
		t.Fatal(err)
	}
	h := checkpoint.Horizon{Read: time.UnixMilli(1_764_000_000_100).UTC(), PendingFrom: time.UnixMilli(1_764_000_000_050).UTC(), At: time.UnixMilli(1_764_000_001_000).UTC()}
	if err := a.PublishHorizon(t.Context(), shard, a.Epoch(shard), h); err != nil {
		t.Fatal(err)
	}
	if err := a.RemoveLeaseOwner(shard); err != nil {
		t.Fatalf("the lease release: %v", err)
	}
	r := stored(t, a, shard)
	if r.Owner != "" || !r.ReadHorizon.Equal(h.Read) || !r.PendingFrom.Equal(h.PendingFrom) || !r.HorizonAt.Equal(h.At) {
		t.Fatalf("row after the release: %+v, want no owner and the horizon %+v kept", r, h)
	}
	b := leases(t, table, "B", time.Hour)
	if err := b.GetLease(shardStatus(shard, ""), "B"); err != nil {
		t.Fatal(err)
	}
	if r := stored(t, b, shard); !r.ReadHorizon.IsZero() || !r.PendingFrom.IsZero() || !r.HorizonAt.IsZero() {
		t.Fatalf("row after B took the released lease: %+v, want the horizon removed", r)
	}
}
