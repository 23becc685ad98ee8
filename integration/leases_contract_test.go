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

// TestLeasesKeepTheLeaseContract runs the contract the in-memory store keeps in checkpoint's unit
// tests against checkpoint.Leases over DynamoDB Local: the two stores must not drift apart.
func TestLeasesKeepTheLeaseContract(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) leasetest.Table { return dynamoLeaseTable{name: leaseTable(t)} })
}
