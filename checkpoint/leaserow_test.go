package checkpoint

import (
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestParseLeaseRowReadsEveryAttribute(t *testing.T) {
	t.Parallel()
	ts := "2026-12-01T10:00:00.123456789Z"
	r, err := ParseLeaseRow(map[string]types.AttributeValue{
		AttrShardID:       &types.AttributeValueMemberS{Value: "shardId-1"},
		AttrAssignedTo:    &types.AttributeValueMemberS{Value: "w1"},
		AttrCheckpoint:    &types.AttributeValueMemberS{Value: "123"},
		AttrParentShardID: &types.AttributeValueMemberS{Value: "shardId-0"},
		AttrLeaseTimeout:  &types.AttributeValueMemberS{Value: ts},
		AttrLeaseEpoch:    &types.AttributeValueMemberN{Value: "7"},
		AttrReadHorizon:   &types.AttributeValueMemberN{Value: "1764583200123"},
		AttrPendingFrom:   &types.AttributeValueMemberN{Value: "1764583199000"},
		AttrHorizonAt:     &types.AttributeValueMemberN{Value: "1764583201000"},
	})
	want, _ := time.Parse(time.RFC3339Nano, ts)
	if err != nil || !r.Exists || r.Shard != "shardId-1" || r.Owner != "w1" || r.Checkpoint != "123" || r.Parent != "shardId-0" ||
		r.Epoch != 7 || r.LeaseTimeoutText != ts || !r.LeaseTimeout.Equal(want) ||
		r.ReadHorizon.UnixMilli() != 1764583200123 || r.PendingFrom.UnixMilli() != 1764583199000 || r.HorizonAt.UnixMilli() != 1764583201000 {
		t.Fatalf("parsed %+v, %v", r, err)
	}
}

func TestParseLeaseRowOfNoRow(t *testing.T) {
	t.Parallel()
	r, err := ParseLeaseRow(nil)
	if err != nil || !reflect.DeepEqual(r, LeaseRow{}) {
		t.Fatalf("parsed %+v, %v; want the zero row", r, err)
	}
}

// A malformed timeout or epoch is an error, but the rest of the row is read (status displays it).
func TestParseLeaseRowReportsMalformedAttributes(t *testing.T) {
	t.Parallel()
	r, err := ParseLeaseRow(map[string]types.AttributeValue{
		AttrShardID:      &types.AttributeValueMemberS{Value: "shardId-1"},
		AttrAssignedTo:   &types.AttributeValueMemberS{Value: "w1"},
		AttrLeaseTimeout: &types.AttributeValueMemberS{Value: "soon"},
		AttrLeaseEpoch:   &types.AttributeValueMemberN{Value: "x"},
		AttrReadHorizon:  &types.AttributeValueMemberN{Value: "1.5"},
		AttrHorizonAt:    &types.AttributeValueMemberN{Value: "1764583201000"},
	})
	if err == nil {
		t.Fatal("no error for a malformed timeout and epoch")
	}
	if r.Owner != "w1" || r.Shard != "shardId-1" || !r.LeaseTimeout.IsZero() || r.Epoch != 0 || r.LeaseTimeoutText != "soon" ||
		!r.ReadHorizon.IsZero() || r.HorizonAt.UnixMilli() != 1764583201000 {
		t.Fatalf("parsed %+v", r)
	}
}
