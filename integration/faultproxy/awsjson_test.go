package faultproxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
)

// SDKConfig is an AWS SDK v2 configuration for endpoint with static test credentials and
// retries off (RetryMaxAttempts 1), so that a test sees the raw error of one attempt: the
// standard retryer would retry throttling and 5xx by itself.
func SDKConfig(endpoint string) aws.Config {
	return aws.Config{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(endpoint),
		RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "faultproxy test"}, nil
		}),
		HTTPClient: awshttp.NewBuildableClient().WithTimeout(10 * time.Second),
	}
}

// awsUpstream fakes DynamoDB and Kinesis: it applies UpdateItem (records it) and PutRecords
// (stores the entries' data), answers GetRecords with no records and anything else with {}.
type awsUpstream struct {
	mu      sync.Mutex
	targets []string // X-Amz-Target of every request received
	stored  []string // PutRecords data, in order
}

func (u *awsUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	target := r.Header.Get("X-Amz-Target")
	u.mu.Lock()
	defer u.mu.Unlock()
	u.targets = append(u.targets, target)
	answer := `{}`
	switch target {
	case "Kinesis_20131202.GetRecords":
		answer = `{"Records":[],"NextShardIterator":"next","MillisBehindLatest":0}`
	case "Kinesis_20131202.PutRecords":
		var req struct{ Records []struct{ Data []byte } }
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		entries := make([]string, len(req.Records))
		for i, rec := range req.Records {
			u.stored = append(u.stored, string(rec.Data))
			entries[i] = `{"SequenceNumber":"` + strconv.Itoa(len(u.stored)) + `","ShardId":"shardId-000000000000"}`
		}
		answer = `{"FailedRecordCount":0,"Records":[` + strings.Join(entries, ",") + `],"EncryptionType":"NONE"}`
	}
	w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
	w.Header().Set("X-Amzn-Requestid", "upstream")
	_, _ = io.WriteString(w, answer)
}

func (u *awsUpstream) storedData() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.stored...)
}

func (u *awsUpstream) received() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.targets...)
}

func startAWS(t *testing.T, rules ...Rule) (*Proxy, *awsUpstream) {
	t.Helper()
	up := &awsUpstream{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	p, err := New(srv.URL, Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	p.SetRules(rules...)
	return p, up
}

func target(op string) *regexp.Regexp { return regexp.MustCompile(`^` + regexp.QuoteMeta(op) + `$`) }

func updateItem(ctx context.Context, c *dynamodb.Client) error {
	_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String("leases"),
		Key:                       map[string]ddbtypes.AttributeValue{"leaseKey": &ddbtypes.AttributeValueMemberS{Value: "shardId-000000000000"}},
		UpdateExpression:          aws.String("SET leaseCounter = :c"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":c": &ddbtypes.AttributeValueMemberN{Value: "2"}},
	})
	return err
}

func getRecords(ctx context.Context, c *kinesis.Client) error {
	_, err := c.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: aws.String("iterator")})
	return err
}

// TestTargetSelects: a rule with Target faults only the operation it names; the others,
// though the same method and path (POST /), are forwarded.
func TestTargetSelects(t *testing.T) {
	p, up := startAWS(t, Rule{Name: "lease-write", Method: http.MethodPost, Target: target("DynamoDB_20120810.UpdateItem"),
		Kinds: []Kind{KindThroughput}, Prob: 1})
	ddb := dynamodb.NewFromConfig(SDKConfig(p.URL()))
	if _, err := ddb.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String("leases"),
		Key: map[string]ddbtypes.AttributeValue{"leaseKey": &ddbtypes.AttributeValueMemberS{Value: "k"}}}); err != nil {
		t.Fatalf("GetItem is not selected, want it forwarded: %v", err)
	}
	if err := updateItem(t.Context(), ddb); err == nil {
		t.Fatal("UpdateItem is selected, want a fault")
	}
	if got := up.received(); len(got) != 1 || got[0] != "DynamoDB_20120810.GetItem" {
		t.Fatalf("upstream received %v, want only the GetItem", got)
	}
	if e := p.Events(); len(e) != 1 || e[0].Target != "DynamoDB_20120810.UpdateItem" || e[0].Kind != KindThroughput {
		t.Fatalf("events %+v", e)
	}
}

// AWSErrorCase is one injected AWS JSON error and what the SDK must surface of it (shared with
// the emulator tests).
type AWSErrorCase struct {
	Name   string
	Op     string // X-Amz-Target
	Kind   Kind
	Status int // Rule.Status for KindStatus
	// Want checks the SDK error's type.
	Want     func(error) bool
	WantCode string // the smithy.APIError code
	WantHTTP int
}

// Rule is a rule that injects the case's fault into every request of its operation.
func (c AWSErrorCase) Rule() Rule {
	return Rule{Name: c.Name, Target: target(c.Op), Kinds: []Kind{c.Kind}, Prob: 1, Status: c.Status}
}

// AWSErrorCases lists the AWS JSON errors on DynamoDB UpdateItem and Kinesis GetRecords.
func AWSErrorCases() []AWSErrorCase {
	is := func(target any) func(error) bool { return func(err error) bool { return errors.As(err, target) } }
	var (
		ddbThroughput *ddbtypes.ProvisionedThroughputExceededException
		ddbThrottling *ddbtypes.ThrottlingException
		ddbInternal   *ddbtypes.InternalServerError
		kinThroughput *kintypes.ProvisionedThroughputExceededException
		kinExpired    *kintypes.ExpiredIteratorException
		generic       *smithy.GenericAPIError
	)
	const upd, get = "DynamoDB_20120810.UpdateItem", "Kinesis_20131202.GetRecords"
	return []AWSErrorCase{
		{"ddb-throughput", upd, KindThroughput, 0, is(&ddbThroughput), "ProvisionedThroughputExceededException", 400},
		{"ddb-throttling", upd, KindThrottling, 0, is(&ddbThrottling), "ThrottlingException", 400},
		{"ddb-500", upd, KindStatus, 500, is(&ddbInternal), "InternalServerError", 500},
		{"ddb-503", upd, KindStatus, 503, is(&generic), "ServiceUnavailable", 503},
		{"kinesis-throughput", get, KindThroughput, 0, is(&kinThroughput), "ProvisionedThroughputExceededException", 400},
		{"kinesis-expired", get, KindExpiredIterator, 0, is(&kinExpired), "ExpiredIteratorException", 400},
		{"kinesis-500", get, KindStatus, 500, is(&generic), "InternalFailure", 500},
		{"kinesis-503", get, KindStatus, 503, is(&generic), "ServiceUnavailable", 503},
	}
}

// Check fails t unless err is the error c wants, as the SDK surfaces it: its type, its code,
// the HTTP status and the message from the body.
func (c AWSErrorCase) Check(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("want an error, got an answer")
	}
	var api smithy.APIError
	var re *awshttp.ResponseError
	switch {
	case !c.Want(err):
		t.Fatalf("error %T %v: not the type the SDK decodes %s into", err, err, c.WantCode)
	case !errors.As(err, &api) || api.ErrorCode() != c.WantCode:
		t.Fatalf("error %v: want code %s", err, c.WantCode)
	case !errors.As(err, &re) || re.HTTPStatusCode() != c.WantHTTP:
		t.Fatalf("error %v: want HTTP %d", err, c.WantHTTP)
	case !strings.Contains(api.ErrorMessage(), "faultproxy"):
		t.Fatalf("error %v: want the message parsed from the body", err)
	}
}

func (c AWSErrorCase) call(ctx context.Context, endpoint string) error {
	if strings.HasPrefix(c.Op, "DynamoDB") {
		return updateItem(ctx, dynamodb.NewFromConfig(SDKConfig(endpoint)))
	}
	return getRecords(ctx, kinesis.NewFromConfig(SDKConfig(endpoint)))
}

// TestAWSErrors: every AWS JSON error answer reaches the SDK as the typed error AWS's own answer
// gives, and the request is not forwarded; the fault is counted by kind and by rule and kind.
func TestAWSErrors(t *testing.T) {
	for _, c := range AWSErrorCases() {
		t.Run(c.Name, func(t *testing.T) {
			p, up := startAWS(t, c.Rule())
			c.Check(t, c.call(t.Context(), p.URL()))
			if got := up.received(); len(got) != 0 {
				t.Fatalf("upstream received %v, want nothing forwarded", got)
			}
			if p.Counts()[c.Kind] != 1 || p.CountsByRule()[c.Name][c.Kind] != 1 || p.Total() != 1 {
				t.Fatalf("counts %v by rule %v", p.Counts(), p.CountsByRule())
			}
			// The connection stays usable: the next call on the same client goes through.
			p.Enable(false)
			if err := c.call(t.Context(), p.URL()); err != nil {
				t.Fatalf("after the fault: %v", err)
			}
		})
	}
}

// TestAWSErrorBody: the raw answer is the protocol's: HTTP 400, the request's Content-Type, a
// JSON body with __type in the service's namespace.
func TestAWSErrorBody(t *testing.T) {
	p, _ := startAWS(t, Rule{Name: "throughput", Kinds: []Kind{KindThroughput}, Prob: 1})
	for target, wantType := range map[string]string{
		"DynamoDB_20120810.UpdateItem": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
		"Kinesis_20131202.GetRecords":  "ProvisionedThroughputExceededException",
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, p.URL()+"/", strings.NewReader("{}"))
		req.Header.Set("X-Amz-Target", target)
		req.Header.Set("Content-Type", "application/x-amz-json-1.1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Type    string `json:"__type"`
			Message string `json:"message"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != 400 || body.Type != wantType || body.Message == "" ||
			resp.Header.Get("Content-Type") != "application/x-amz-json-1.1" {
			t.Fatalf("%s: %d %s %+v %v", target, resp.StatusCode, resp.Header.Get("Content-Type"), body, err)
		}
	}
}

// TestAWSLostUpdateItem: KindLost on a DynamoDB UpdateItem applies the write and loses its
// answer: the SDK gets a connection error, not an API error.
func TestAWSLostUpdateItem(t *testing.T) {
	p, up := startAWS(t, Rule{Name: "lease-write", Target: target("DynamoDB_20120810.UpdateItem"), Kinds: []Kind{KindLost}, Prob: 1})
	err := updateItem(t.Context(), dynamodb.NewFromConfig(SDKConfig(p.URL())))
	var api smithy.APIError
	if err == nil || errors.As(err, &api) || !IsInjected(err) {
		t.Fatalf("want a connection error, got %v", err)
	}
	if got := up.received(); len(got) != 1 || got[0] != "DynamoDB_20120810.UpdateItem" {
		t.Fatalf("upstream received %v, want the UpdateItem applied", got)
	}
	if e := p.Events(); len(e) != 1 || e[0].Upstream != http.StatusOK {
		t.Fatalf("events %+v", e)
	}
}

func putEntries(ctx context.Context, c *kinesis.Client, data ...string) (*kinesis.PutRecordsOutput, error) {
	in := &kinesis.PutRecordsInput{StreamName: aws.String("cdc")}
	for i, d := range data {
		in.Records = append(in.Records, kintypes.PutRecordsRequestEntry{Data: []byte(d), PartitionKey: aws.String("pk" + strconv.Itoa(i))})
	}
	return c.PutRecords(ctx, in)
}

// CheckPartialPut fails t unless out answers a PutRecords of sent as a partial failure whose
// succeeding entries are exactly stored (in order) and whose failed entries carry the throughput
// error, with FailedRecordCount counting them; it returns the number failed.
func CheckPartialPut(t *testing.T, sent []string, out *kinesis.PutRecordsOutput, stored []string) int {
	t.Helper()
	if len(out.Records) != len(sent) {
		t.Fatalf("%d answer entries for %d sent", len(out.Records), len(sent))
	}
	var ok []string
	failed := 0
	for i, e := range out.Records {
		switch {
		case e.ErrorCode == nil && e.SequenceNumber != nil && e.ShardId != nil:
			ok = append(ok, sent[i])
		case e.ErrorCode != nil && *e.ErrorCode == "ProvisionedThroughputExceededException" && e.ErrorMessage != nil && e.SequenceNumber == nil:
			failed++
		default:
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	if out.FailedRecordCount == nil || int(*out.FailedRecordCount) != failed || failed == 0 {
		t.Fatalf("FailedRecordCount %v, %d entries failed", out.FailedRecordCount, failed)
	}
	if strings.Join(ok, ",") != strings.Join(stored, ",") {
		t.Fatalf("succeeded %v, stored %v: want the same entries", ok, stored)
	}
	return failed
}

// TestPartialPut: KindPartialPut forwards only the entries that succeed and answers the others
// failed at their indexes; with FailEntries 1 nothing is forwarded; operations other than
// PutRecords are forwarded unchanged and count no fault.
func TestPartialPut(t *testing.T) {
	rule := Rule{Name: "put", Target: KinesisTarget("PutRecords", "PutRecord"), Kinds: []Kind{KindPartialPut}, Prob: 1}
	p, up := startAWS(t, rule)
	kin := kinesis.NewFromConfig(SDKConfig(p.URL()))
	sent := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	out, err := putEntries(t.Context(), kin, sent...)
	if err != nil {
		t.Fatal(err)
	}
	failed := CheckPartialPut(t, sent, out, up.storedData())
	if failed == len(sent) || out.EncryptionType != kintypes.EncryptionTypeNone {
		t.Fatalf("%d of %d failed (seeded: want some to succeed), encryption %q kept", failed, len(sent), out.EncryptionType)
	}
	if e := p.Events(); len(e) != 1 || e[0].Failed != failed || e[0].Upstream != 200 || p.CountsByRule()["put"][KindPartialPut] != 1 {
		t.Fatalf("events %+v counts %v", e, p.CountsByRule())
	}

	// A single PutRecord is not a PutRecords: forwarded, no fault, Max's budget kept for the
	// PutRecords that follows; with FailEntries 1 nothing of it is forwarded.
	rule.Max, rule.FailEntries = 1, 1
	p.SetRules(rule)
	if _, err := kin.PutRecord(t.Context(), &kinesis.PutRecordInput{StreamName: aws.String("cdc"), Data: []byte("x"), PartitionKey: aws.String("k")}); err != nil {
		t.Fatal(err)
	}
	if p.Total() != 1 {
		t.Fatalf("PutRecord counted a fault: %v", p.Counts())
	}
	before := len(up.received())
	out, err = putEntries(t.Context(), kin, "x", "y")
	if err != nil {
		t.Fatal(err)
	}
	if len(up.received()) != before || *out.FailedRecordCount != 2 || p.Total() != 2 || p.Events()[1].Failed != 2 || p.Events()[1].Upstream != 0 {
		t.Fatalf("all failing: forwarded %v, answer %+v, events %+v", up.received()[before:], out, p.Events())
	}
	// Max reached: the retry is forwarded whole.
	if out, err = putEntries(t.Context(), kin, "x", "y"); err != nil || *out.FailedRecordCount != 0 || p.Total() != 2 {
		t.Fatalf("after Max: %+v %v, faults %v", out, err, p.Counts())
	}
}

// TestMergePutRecords: the upstream's own failed entries stay where they are and count.
func TestMergePutRecords(t *testing.T) {
	up, err := parsePutRecords([]byte(`{"FailedRecordCount":1,"Records":[{"SequenceNumber":"1","ShardId":"s"},{"ErrorCode":"InternalFailure","ErrorMessage":"m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	merged, upFailed := mergePutRecords(up, []bool{true, false, true, false})
	var got []string
	for _, m := range merged {
		got = append(got, string(m))
	}
	want := []string{string(failedEntry), `{"SequenceNumber":"1","ShardId":"s"}`, string(failedEntry), `{"ErrorCode":"InternalFailure","ErrorMessage":"m"}`}
	if upFailed != 1 || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("merged %v (upstream failed %d), want %v", got, upFailed, want)
	}
}

// TestTargetRegexps: DynamoDBTarget and KinesisTarget match their service's operations named,
// or all of them, and nothing else.
func TestTargetRegexps(t *testing.T) {
	for _, c := range []struct {
		re    *regexp.Regexp
		match []string
		not   []string
	}{
		{DynamoDBTarget("UpdateItem", "PutItem"), []string{"DynamoDB_20120810.UpdateItem", "DynamoDB_20120810.PutItem"},
			[]string{"DynamoDB_20120810.GetItem", "DynamoDB_20120810.UpdateItemX", "Kinesis_20131202.PutItem", ""}},
		{DynamoDBTarget(), []string{"DynamoDB_20120810.Scan"}, []string{"Kinesis_20131202.GetRecords"}},
		{KinesisTarget("GetRecords"), []string{"Kinesis_20131202.GetRecords"}, []string{"Kinesis_20131202.GetShardIterator"}},
	} {
		for _, s := range c.match {
			if !c.re.MatchString(s) {
				t.Errorf("%s does not match %q", c.re, s)
			}
		}
		for _, s := range c.not {
			if c.re.MatchString(s) {
				t.Errorf("%s matches %q", c.re, s)
			}
		}
	}
}

// TestSummaryAWSKinds: Summary adds the AWS kinds a rule names.
func TestSummaryAWSKinds(t *testing.T) {
	p, _ := startAWS(t, Rule{Name: "r", Kinds: []Kind{KindExpiredIterator}, Prob: 1})
	if s := p.Summary(); !strings.HasSuffix(s, " expired-iterator=0") || strings.Contains(s, "throttling") {
		t.Fatalf("summary %q", s)
	}
}
