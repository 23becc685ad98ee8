package faultproxy_test

import (
	"fmt"
	"time"

	"github.com/dms2iceberg/dms2iceberg/integration/faultproxy"
)

// Example_awsJSON shows rules for a chaos run in front of DynamoDB (the KCL lease table) and
// Kinesis: point the service's AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL_KINESIS at the
// proxies' URLs. The SDK retries throttling and 5xx by itself (3 attempts), so a probability of
// a few percent already makes some calls fail after their retries.
func Example_awsJSON() {
	hold := 2 * time.Second
	// Lease-table writes (take, renew, checkpoint, evict): throttled, refused, or applied with
	// the answer lost (the lease code's unknown-outcome path: its retry fails its condition).
	dynamo := []faultproxy.Rule{
		{Name: "lease-write", Target: faultproxy.DynamoDBTarget("UpdateItem", "PutItem", "DeleteItem"),
			Kinds: []faultproxy.Kind{faultproxy.KindThroughput, faultproxy.KindThrottling, faultproxy.KindStatus,
				faultproxy.KindLost, faultproxy.KindLost5xx, faultproxy.KindTimeout, faultproxy.KindReset},
			Prob: 0.05, Hold: hold},
		{Name: "lease-read", Target: faultproxy.DynamoDBTarget("GetItem", "Scan", "Query"),
			Kinds: []faultproxy.Kind{faultproxy.KindThroughput, faultproxy.KindStatus, faultproxy.KindReset}, Prob: 0.02},
	}
	// Kinesis reads: throughput exceeded, an expired iterator (the consumer must get a new one
	// from its checkpoint), 5xx, resets.
	kin := []faultproxy.Rule{
		{Name: "get-records", Target: faultproxy.KinesisTarget("GetRecords"),
			Kinds: []faultproxy.Kind{faultproxy.KindThroughput, faultproxy.KindExpiredIterator, faultproxy.KindStatus,
				faultproxy.KindReset, faultproxy.KindTimeout}, Prob: 0.05, Hold: hold},
		// Heartbeat puts: some entries refused (the rest stored), or all stored with the answer
		// lost (the producer resends: duplicates downstream).
		{Name: "put-records", Target: faultproxy.KinesisTarget("PutRecords"),
			Kinds: []faultproxy.Kind{faultproxy.KindPartialPut, faultproxy.KindThroughput, faultproxy.KindLost},
			Prob:  0.1, FailEntries: 0.3},
	}
	fmt.Println(len(dynamo), len(kin))
	// After the run: px.Summary() by kind, px.CountsByRule() by rule and kind, px.Events().
	// Output: 2 2
}
