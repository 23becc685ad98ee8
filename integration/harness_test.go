//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func TestMain(m *testing.M) { os.Exit(RunTests(m)) }

// TestHarnessEmulators checks that the three emulators answer real API calls the way the service
// uses them.
func TestHarnessEmulators(t *testing.T) {
	RequireEmulators(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	t.Run("kinesis", func(t *testing.T) {
		name := UniqueName("harness")
		CreateStream(t, name, 2)
		kc := Kinesis(t)
		out, err := kc.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		if err != nil {
			t.Fatalf("describe stream: %v", err)
		}
		if got := out.StreamDescriptionSummary.StreamStatus; got != kintypes.StreamStatusActive {
			t.Fatalf("stream status %s, want ACTIVE", got)
		}
		if got := aws.ToInt32(out.StreamDescriptionSummary.OpenShardCount); got != 2 {
			t.Fatalf("open shards %d, want 2", got)
		}
		DeleteStream(t, name)
		_, err = kc.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		var nf *kintypes.ResourceNotFoundException
		if !errors.As(err, &nf) {
			t.Fatalf("describe after delete: got %v, want ResourceNotFoundException", err)
		}
	})

	t.Run("dynamodb", func(t *testing.T) {
		name := UniqueName("harness")
		dc := DynamoDB(t)
		_, err := dc.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName:            aws.String(name),
			BillingMode:          ddbtypes.BillingModePayPerRequest,
			AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("k"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
			KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("k"), KeyType: ddbtypes.KeyTypeHash}},
		})
		if err != nil {
			t.Fatalf("create table: %v", err)
		}
		if err := dynamodb.NewTableExistsWaiter(dc).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute); err != nil {
			t.Fatalf("table not active: %v", err)
		}
		// A conditional write, as the KCL's lease code does.
		put := &dynamodb.PutItemInput{
			TableName:           aws.String(name),
			Item:                map[string]ddbtypes.AttributeValue{"k": &ddbtypes.AttributeValueMemberS{Value: "lease-1"}},
			ConditionExpression: aws.String("attribute_not_exists(k)"),
		}
		if _, err := dc.PutItem(ctx, put); err != nil {
			t.Fatalf("put item: %v", err)
		}
		var ccf *ddbtypes.ConditionalCheckFailedException
		if _, err := dc.PutItem(ctx, put); !errors.As(err, &ccf) {
			t.Fatalf("second conditional put: got %v, want ConditionalCheckFailedException", err)
		}
		DeleteTable(t, name)
	})

	t.Run("s3", func(t *testing.T) {
		bucket := UniqueName("harness")
		sc := S3(t)
		if _, err := sc.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
			t.Fatalf("create bucket: %v", err)
		}
		body := []byte("hello from the dms2iceberg harness\n")
		key := "dir/object.txt"
		if _, err := sc.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
			t.Fatalf("put object: %v", err)
		}
		got, err := sc.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("get object: %v", err)
		}
		b, err := io.ReadAll(got.Body)
		_ = got.Body.Close()
		if err != nil {
			t.Fatalf("read object: %v", err)
		}
		if !bytes.Equal(b, body) {
			t.Fatalf("object body %q, want %q", b, body)
		}
		if _, err := sc.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
			t.Fatalf("delete object: %v", err)
		}
		if _, err := sc.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)}); err != nil {
			t.Fatalf("delete bucket: %v", err)
		}
	})
}

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)

func TestHarnessUniqueName(t *testing.T) {
	seen := map[string]bool{}
	for _, prefix := range []string{"e2e", "TestFoo/Sub_Case#01", strings.Repeat("x", 100), "", "--"} {
		for range 50 {
			n := UniqueName(prefix)
			if !validName.MatchString(n) {
				t.Fatalf("UniqueName(%q) = %q: not a valid bucket/stream/table name", prefix, n)
			}
			if seen[n] {
				t.Fatalf("UniqueName(%q) repeated %q", prefix, n)
			}
			seen[n] = true
		}
	}
}

func TestHarnessWaitFor(t *testing.T) {
	n := 0
	start := time.Now()
	WaitFor(t, 5*time.Second, 10*time.Millisecond, func() (bool, error) {
		n++
		if n < 3 {
			return false, errors.New("not yet")
		}
		return true, nil
	}, "third poll")
	if n != 3 || time.Since(start) > 4*time.Second {
		t.Fatalf("WaitFor polled %d times in %s", n, time.Since(start))
	}
}

// fakeService is a stand-in for the binary: it prints its arguments and one variable, exits 0
// on SIGTERM, and keeps a child in its process group (so Kill must take the whole group).
const fakeService = `#!/bin/sh
echo "args: $*"
echo "HARNESS_VAR=$HARNESS_VAR"
echo "to stderr" >&2
trap 'echo "got TERM"; exit 0' TERM
sleep 300 &
echo "child $!"
while :; do sleep 0.05; done
`

func writeFake(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-dms2iceberg")
	if err := os.WriteFile(p, []byte(fakeService), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHarnessService checks StartService, Stop, Kill and the log against a fake binary, so it
// does not depend on the service itself.
func TestHarnessService(t *testing.T) {
	bin := writeFake(t)

	t.Run("stop", func(t *testing.T) {
		s := StartService(t, bin, "/path/config.yaml", "HARNESS_VAR=42")
		WaitFor(t, 10*time.Second, 20*time.Millisecond, func() (bool, error) {
			return strings.Contains(s.Log(), "child "), nil
		}, "fake service to start")
		if err := s.Stop(10 * time.Second); err != nil {
			t.Fatalf("Stop: %v, want clean exit", err)
		}
		log := s.Log()
		for _, want := range []string{"args: run --config /path/config.yaml", "HARNESS_VAR=42", "to stderr", "got TERM"} {
			if !strings.Contains(log, want) {
				t.Errorf("log lacks %q:\n%s", want, log)
			}
		}
		if code, exited := s.ExitCode(); !exited || code != 0 {
			t.Fatalf("ExitCode = %d, %v", code, exited)
		}
	})

	t.Run("kill", func(t *testing.T) {
		s := StartService(t, bin, "c.yaml")
		var child string
		WaitFor(t, 10*time.Second, 20*time.Millisecond, func() (bool, error) {
			m := regexp.MustCompile(`child (\d+)`).FindStringSubmatch(s.Log())
			if m != nil {
				child = m[1]
			}
			return m != nil, nil
		}, "fake service to start its child")
		s.Kill()
		var ee *exec.ExitError
		if err := s.Wait(); !errors.As(err, &ee) || ee.ExitCode() != -1 {
			t.Fatalf("Wait after Kill: %v, want killed by a signal", err)
		}
		WaitFor(t, 5*time.Second, 20*time.Millisecond, func() (bool, error) {
			_, err := os.Stat("/proc/" + child)
			return os.IsNotExist(err), nil
		}, "the child in the process group to die")
	})
}

// TestHarnessBinary builds the real binary and runs it once through RunCLI.
func TestHarnessBinary(t *testing.T) {
	bin := BuildBinary(t)
	if again := BuildBinary(t); again != bin {
		t.Fatalf("BuildBinary built twice: %s, %s", bin, again)
	}
	stdout, stderr, err := RunCLI(t, bin, "--help")
	if err != nil {
		t.Fatalf("dms2iceberg --help: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "usage: dms2iceberg") {
		t.Fatalf("dms2iceberg --help printed:\n%s", stdout)
	}
	_, stderr, err = RunCLI(t, bin, "no-such-command")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr, "unknown command") {
		t.Fatalf("unknown command: err %v, stderr %q; want exit 2 and 'unknown command'", err, stderr)
	}
}
