//go:build integration

package faultproxy_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/dms2iceberg/dms2iceberg/integration"
	"github.com/dms2iceberg/dms2iceberg/integration/faultproxy"
)

// emulator returns the endpoint of env after integration.RequireEmulators: the test fails, never
// skips, when the emulators are not configured or do not answer.
func emulator(t *testing.T, env string) string {
	t.Helper()
	integration.RequireEmulators(t)
	return os.Getenv(env)
}

// directConfig is the SDK configuration of the environment, straight to the emulators.
func directConfig(t *testing.T) aws.Config {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(t.Context())
	if err != nil {
		t.Fatalf("load AWS config: %v", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return cfg
}

var nameSeq atomic.Int64

func uniqueName() string {
	return fmt.Sprintf("faultproxy-%d-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9, nameSeq.Add(1))
}

func proxyTo(t *testing.T, upstream string) *faultproxy.Proxy {
	t.Helper()
	px, err := faultproxy.New(upstream, faultproxy.Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	return px
}

// leaseTable creates a table keyed as the KCL's lease table, with one lease at counter 1.
func leaseTable(t *testing.T, dc *dynamodb.Client) string {
	t.Helper()
	name := uniqueName()
	_, err := dc.CreateTable(t.Context(), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("leaseKey"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("leaseKey"), KeyType: ddbtypes.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := dc.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)}); err != nil {
			t.Logf("cleanup: delete table %s: %v", name, err)
		}
	})
	if err := dynamodb.NewTableExistsWaiter(dc).Wait(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute); err != nil {
		t.Fatalf("table not active: %v", err)
	}
	if _, err := dc.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(name), Item: map[string]ddbtypes.AttributeValue{
		"leaseKey": &ddbtypes.AttributeValueMemberS{Value: "shardId-000000000000"}, "leaseCounter": &ddbtypes.AttributeValueMemberN{Value: "1"},
	}}); err != nil {
		t.Fatalf("put lease: %v", err)
	}
	return name
}

// renew is a lease renewal as the KCL writes it: the counter moves from what the worker last
// saw, on condition that nobody else moved it.
func renew(ctx context.Context, c *dynamodb.Client, table string, from int) error {
	_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(table),
		Key:                 map[string]ddbtypes.AttributeValue{"leaseKey": &ddbtypes.AttributeValueMemberS{Value: "shardId-000000000000"}},
		UpdateExpression:    aws.String("SET leaseCounter = :next"),
		ConditionExpression: aws.String("leaseCounter = :seen"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":seen": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(from)},
			":next": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(from + 1)},
		},
	})
	return err
}

func counter(t *testing.T, dc *dynamodb.Client, table string) string {
	t.Helper()
	out, err := dc.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{"leaseKey": &ddbtypes.AttributeValueMemberS{Value: "shardId-000000000000"}}})
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	n, _ := out.Item["leaseCounter"].(*ddbtypes.AttributeValueMemberN)
	if n == nil {
		t.Fatalf("lease %v has no counter", out.Item)
	}
	return n.Value
}

// TestFaultProxyDynamoDB: in front of DynamoDB Local, every injected error on a lease renewal
// reaches the SDK as the typed error DynamoDB's answer gives, and the lease is unchanged; a lost
// answer leaves the renewal applied, so that the client's retry of it fails its condition (the
// unknown-outcome path of the lease code); with faults off the proxy forwards.
func TestFaultProxyDynamoDB(t *testing.T) {
	px := proxyTo(t, emulator(t, "AWS_ENDPOINT_URL_DYNAMODB"))
	// DynamoDB Local's error answers fail the SDK's CRC32 check harmlessly (a warning each).
	direct := dynamodb.NewFromConfig(directConfig(t), func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true })
	table := leaseTable(t, direct)
	viaProxy := dynamodb.NewFromConfig(faultproxy.SDKConfig(px.URL()))

	for _, c := range faultproxy.AWSErrorCases() {
		if !strings.HasPrefix(c.Op, "DynamoDB_20120810.") {
			continue
		}
		px.SetRules(c.Rule())
		c.Check(t, renew(t.Context(), viaProxy, table, 1))
		if got := counter(t, direct, table); got != "1" {
			t.Fatalf("%s: lease counter %s, want 1 (the write must not be applied)", c.Name, got)
		}
		if px.CountsByRule()[c.Name][c.Kind] != 1 {
			t.Fatalf("%s: counts %v", c.Name, px.CountsByRule())
		}
	}

	px.SetRules(faultproxy.Rule{Name: "lease-write", Target: faultproxy.DynamoDBTarget("UpdateItem"),
		Kinds: []faultproxy.Kind{faultproxy.KindLost}, Prob: 1, Max: 1})
	err := renew(t.Context(), viaProxy, table, 1)
	var api smithy.APIError
	if err == nil || errors.As(err, &api) || !faultproxy.IsInjected(err) {
		t.Fatalf("lost answer: want a connection error, got %v", err)
	}
	if got := counter(t, direct, table); got != "2" {
		t.Fatalf("lease counter %s after the lost answer, want 2 (the write applied)", got)
	}
	var ccf *ddbtypes.ConditionalCheckFailedException
	if err := renew(t.Context(), viaProxy, table, 1); !errors.As(err, &ccf) {
		t.Fatalf("retrying the applied renewal: got %v, want ConditionalCheckFailedException", err)
	}
	if err := renew(t.Context(), viaProxy, table, 2); err != nil || counter(t, direct, table) != "3" {
		t.Fatalf("forwarded renewal: %v", err)
	}
	t.Logf("faults %s; by rule %v", px.Summary(), px.CountsByRule())
}

// createStream creates a one-shard stream, waits until it is ACTIVE, and deletes it when the
// test ends.
func createStream(t *testing.T, kc *kinesis.Client) string {
	t.Helper()
	name := uniqueName()
	if _, err := kc.CreateStream(t.Context(), &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := kc.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String(name), EnforceConsumerDeletion: aws.Bool(true)}); err != nil {
			t.Logf("cleanup: delete stream %s: %v", name, err)
		}
	})
	w := kinesis.NewStreamExistsWaiter(kc, func(o *kinesis.StreamExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 500*time.Millisecond
	})
	if err := w.Wait(t.Context(), &kinesis.DescribeStreamInput{StreamName: aws.String(name)}, time.Minute); err != nil {
		t.Fatalf("stream %s not ACTIVE: %v", name, err)
	}
	return name
}

// records reads every record of a one-shard stream, from its start.
func records(t *testing.T, kc *kinesis.Client, stream string) []kintypes.Record {
	t.Helper()
	it, err := kc.GetShardIterator(t.Context(), &kinesis.GetShardIteratorInput{StreamName: aws.String(stream),
		ShardId: aws.String("shardId-000000000000"), ShardIteratorType: kintypes.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatalf("shard iterator: %v", err)
	}
	var out []kintypes.Record
	iter := it.ShardIterator
	for range 20 {
		got, err := kc.GetRecords(t.Context(), &kinesis.GetRecordsInput{ShardIterator: iter})
		if err != nil {
			t.Fatalf("get records: %v", err)
		}
		out = append(out, got.Records...)
		if len(got.Records) == 0 && aws.ToInt64(got.MillisBehindLatest) == 0 {
			break
		}
		iter = got.NextShardIterator
	}
	return out
}

// TestFaultProxyKinesis: in front of kinesis-mock, every injected GetRecords error reaches the
// SDK as the typed error Kinesis's answer gives; a PutRecords partial failure stores exactly the
// entries answered with a sequence number, at those sequence numbers; with faults off the proxy
// forwards.
func TestFaultProxyKinesis(t *testing.T) {
	px := proxyTo(t, emulator(t, "AWS_ENDPOINT_URL_KINESIS"))
	direct := kinesis.NewFromConfig(directConfig(t))
	stream := createStream(t, direct)
	viaProxy := kinesis.NewFromConfig(faultproxy.SDKConfig(px.URL()))
	it, err := viaProxy.GetShardIterator(t.Context(), &kinesis.GetShardIteratorInput{StreamName: aws.String(stream),
		ShardId: aws.String("shardId-000000000000"), ShardIteratorType: kintypes.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatalf("shard iterator through the proxy: %v", err)
	}

	kinesisCases := 0
	for _, c := range faultproxy.AWSErrorCases() {
		if !strings.HasPrefix(c.Op, "Kinesis_20131202.") {
			continue
		}
		kinesisCases++
		px.SetRules(c.Rule())
		_, err := viaProxy.GetRecords(t.Context(), &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
		c.Check(t, err)
	}

	px.SetRules(faultproxy.Rule{Name: "put", Target: faultproxy.KinesisTarget("PutRecords"),
		Kinds: []faultproxy.Kind{faultproxy.KindPartialPut}, Prob: 1, Max: 1})
	in := &kinesis.PutRecordsInput{StreamName: aws.String(stream)}
	var sent []string
	for i := range 20 {
		sent = append(sent, "entry-"+strconv.Itoa(i))
		in.Records = append(in.Records, kintypes.PutRecordsRequestEntry{Data: []byte(sent[i]), PartitionKey: aws.String(strconv.Itoa(i))})
	}
	out, err := viaProxy.PutRecords(t.Context(), in)
	if err != nil {
		t.Fatalf("put records: %v", err)
	}
	stored := records(t, direct, stream)
	var data, seqs, answered []string
	for _, r := range stored {
		data, seqs = append(data, string(r.Data)), append(seqs, aws.ToString(r.SequenceNumber))
	}
	failed := faultproxy.CheckPartialPut(t, sent, out, data)
	for _, e := range out.Records {
		if e.SequenceNumber != nil {
			answered = append(answered, *e.SequenceNumber)
		}
	}
	if strings.Join(answered, ",") != strings.Join(seqs, ",") || failed == len(sent) {
		t.Fatalf("answered sequence numbers %v, stored %v (%d of %d failed)", answered, seqs, failed, len(sent))
	}

	t.Logf("PutRecords: %d of %d entries failed, %d stored; faults %s", failed, len(sent), len(data), px.Summary())

	// Max 1: the retry of the failed entries is forwarded whole, as a client's retry after
	// throttling would be.
	if _, err := viaProxy.PutRecords(t.Context(), in); err != nil || px.Total() != kinesisCases+1 {
		t.Fatalf("forwarded put: %v (faults %s)", err, px.Summary())
	}
	if got := len(records(t, direct, stream)); got != len(data)+len(sent) {
		t.Fatalf("%d records stored, want %d", got, len(data)+len(sent))
	}
}
