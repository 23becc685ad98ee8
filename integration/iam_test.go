//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/glue"
	gluetypes "github.com/aws/aws-sdk-go-v2/service/glue/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/dms2iceberg/dms2iceberg/integration/iampolicy"
)

// The AWS calls a service process makes are recorded by reverse proxies in front of the
// emulators (one per AWS service): every client of the process goes through them, the SDK
// clients cmd builds (Kinesis, DynamoDB through the KCL) and the ones iceberg-go builds for Glue
// and S3 from the catalog properties, which no option of ours reaches. The Host header is
// passed on unchanged, so SigV4 signatures stay valid.

// testAccount is the account of the ARNs derived from recorded calls (the emulators' own).
const testAccount = "123456789012"

// awsCall is one AWS API call as IAM authorizes it: the action, each resource it needs, and the
// condition keys of the request.
type awsCall struct {
	op        string // the API operation, for the report
	action    string
	resources []string
	keys      map[string]string
}

type callRecorder struct {
	region, stream string
	mu             sync.Mutex
	calls          []awsCall
}

// proxy starts a recording proxy for AWS service svc in front of upstream and returns its URL.
func (r *callRecorder) proxy(t *testing.T, svc, upstream string) string {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" {
		t.Fatalf("%s endpoint %q: %v", svc, upstream, err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		calls := r.derive(svc, req, body)
		r.mu.Lock()
		r.calls = append(r.calls, calls...)
		r.mu.Unlock()
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// dropDeadLetterTable deletes dms2iceberg.dead_letters from the Glue emulator at endpoint. The
// emulator is shared by the tests, which run one after the other, and the dead-letter table's
// database is fixed: an earlier test's table would sit in that test's warehouse bucket, which this
// run's policy rightly does not grant, and this run would make no CreateTable of its own.
func dropDeadLetterTable(t *testing.T, endpoint string) {
	t.Helper()
	gc := glue.NewFromConfig(AWSConfig(t), func(o *glue.Options) { o.BaseEndpoint = aws.String(endpoint) })
	_, err := gc.DeleteTable(t.Context(), &glue.DeleteTableInput{DatabaseName: aws.String("dms2iceberg"), Name: aws.String("dead_letters")})
	var nf *gluetypes.EntityNotFoundException
	if err != nil && !errors.As(err, &nf) {
		t.Fatalf("delete the dead-letter table of an earlier test: %v", err)
	}
}

// saw reports whether a call of action on a resource containing res was recorded.
func (r *callRecorder) saw(action, res string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		for _, x := range c.resources {
			if c.action == action && strings.Contains(x, res) {
				return true
			}
		}
	}
	return false
}

// tables names the tables ("db.table") the recorded calls created.
func (r *callRecorder) tables() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, c := range r.calls {
		if c.action != "glue:CreateTable" {
			continue
		}
		for _, x := range c.resources {
			if _, t, ok := strings.Cut(x, ":table/"); ok && !seen[t] {
				seen[t] = true
				out = append(out, strings.Replace(t, "/", ".", 1))
			}
		}
	}
	sort.Strings(out)
	return out
}

// derive maps one HTTP request to the IAM actions and resources it needs.
func (r *callRecorder) derive(svc string, req *http.Request, body []byte) []awsCall {
	arn := func(service, res string) string {
		return fmt.Sprintf("arn:aws:%s:%s:%s:%s", service, r.region, testAccount, res)
	}
	if svc == "s3" {
		return deriveS3(req, body)
	}
	target := req.Header.Get("X-Amz-Target")
	_, op, _ := strings.Cut(target, ".")
	var in map[string]any
	_ = json.Unmarshal(body, &in)
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	sub := func(k string) map[string]any { m, _ := in[k].(map[string]any); return m }
	c := awsCall{op: svc + "." + op, action: svc + ":" + op}
	switch svc {
	case "kinesis":
		switch {
		case str(in, "StreamARN") != "":
			c.resources = []string{str(in, "StreamARN")}
		case str(in, "StreamName") != "":
			c.resources = []string{arn("kinesis", "stream/"+str(in, "StreamName"))}
		default: // GetRecords names only its iterator: the service reads one stream
			c.resources = []string{arn("kinesis", "stream/"+r.stream)}
		}
	case "dynamodb":
		c.resources = []string{"*"}
		if n := str(in, "TableName"); n != "" {
			c.resources = []string{arn("dynamodb", "table/"+n)}
		}
	case "glue":
		// Glue authorizes the catalog, the database and the table of a call.
		db := str(in, "DatabaseName")
		tbl := str(in, "Name")
		switch op {
		case "GetDatabase":
			db, tbl = tbl, ""
		case "CreateDatabase":
			db, tbl = str(sub("DatabaseInput"), "Name"), ""
		case "CreateTable", "UpdateTable":
			tbl = str(sub("TableInput"), "Name")
		case "GetTables":
			tbl = "*"
		}
		c.resources = []string{arn("glue", "catalog")}
		if db != "" {
			c.resources = append(c.resources, arn("glue", "database/"+db))
		}
		if db != "" && tbl != "" {
			c.resources = append(c.resources, arn("glue", "table/"+db+"/"+tbl))
		}
	}
	return []awsCall{c}
}

var deleteKeys = regexp.MustCompile(`<Key>([^<]*)</Key>`)

// deriveS3 maps a path-style S3 request to its IAM action and resources.
func deriveS3(req *http.Request, body []byte) []awsCall {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/")
	q := req.URL.Query()
	obj := "arn:aws:s3:::" + bucket + "/" + key
	bkt := "arn:aws:s3:::" + bucket
	one := func(op, action, res string, keys map[string]string) []awsCall {
		return []awsCall{{op: "s3." + op, action: "s3:" + action, resources: []string{res}, keys: keys}}
	}
	switch {
	case key == "" && req.Method == http.MethodPost && q.Has("delete"):
		var out []awsCall
		for _, m := range deleteKeys.FindAllSubmatch(body, -1) {
			out = append(out, one("DeleteObjects", "DeleteObject", bkt+"/"+string(m[1]), nil)...)
		}
		return out
	case key == "" && q.Has("location"):
		return one("GetBucketLocation", "GetBucketLocation", bkt, nil)
	case key == "" && (req.Method == http.MethodGet || req.Method == http.MethodHead):
		var keys map[string]string
		if q.Has("prefix") {
			keys = map[string]string{"s3:prefix": q.Get("prefix")}
		}
		return one("ListObjects", "ListBucket", bkt, keys)
	case key == "":
		return one(req.Method+" bucket", req.Method+"Bucket", bkt, nil)
	case req.Method == http.MethodGet || req.Method == http.MethodHead:
		return one(req.Method+"Object", "GetObject", obj, nil)
	case req.Method == http.MethodPut && req.Header.Get("X-Amz-Copy-Source") != "":
		src := strings.TrimPrefix(req.Header.Get("X-Amz-Copy-Source"), "/")
		return append(one("CopyObject", "PutObject", obj, nil), one("CopyObject", "GetObject", "arn:aws:s3:::"+src, nil)...)
	case req.Method == http.MethodPut || req.Method == http.MethodPost: // PutObject, UploadPart, Create/CompleteMultipartUpload
		return one(req.Method+"Object", "PutObject", obj, nil)
	case req.Method == http.MethodDelete && q.Has("uploadId"):
		return one("AbortMultipartUpload", "AbortMultipartUpload", obj, nil)
	case req.Method == http.MethodDelete:
		return one("DeleteObject", "DeleteObject", obj, nil)
	}
	return one(req.Method, req.Method, obj, nil)
}

// TestIAMPolicyCoversEveryCall runs the service end to end with the Glue catalog (moto) and the
// warehouse on the S3 emulator (with one undecodable record, so that the dead-letter table is
// created and written), then `maintain` on its tables, records every AWS call both processes
// make, and checks
// that the policy shipped in docs/deploy/iam-policy.json allows each one on its resources, with
// the placeholders replaced by this run's names. A call the policy does not grant fails the
// test: it would be AccessDenied in production.
func TestIAMPolicyCoversEveryCall(t *testing.T) {
	var glue catalogCase
	for _, c := range catalogCases() {
		if c.name == "glue" {
			glue = c
		}
	}
	p := newPipeline(t, 2, 300, 13)
	dataDir := t.TempDir()
	catalog, ns, _ := glue.setup(t, dataDir)
	rec := &callRecorder{region: AWSConfig(t).Region, stream: p.stream}
	props := catalog["properties"].(map[string]string)
	dropDeadLetterTable(t, props["glue.endpoint"])
	props["glue.endpoint"] = rec.proxy(t, "glue", props["glue.endpoint"])
	props["s3.endpoint"] = rec.proxy(t, "s3", props["s3.endpoint"])
	q := p.withCatalog(t, "iam", dataDir, catalog, ns)
	env := []string{
		"AWS_ENDPOINT_URL_KINESIS=" + rec.proxy(t, "kinesis", os.Getenv("AWS_ENDPOINT_URL_KINESIS")),
		"AWS_ENDPOINT_URL_DYNAMODB=" + rec.proxy(t, "dynamodb", os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")),
	}
	// A record that is not DMS JSON: its dead letter creates and writes the dead-letter table in
	// its own database (the permission most often forgotten).
	if _, err := Kinesis(t).PutRecord(t.Context(), &kinesis.PutRecordInput{StreamName: aws.String(p.stream),
		PartitionKey: aws.String("bad"), Data: []byte("not json")}); err != nil {
		t.Fatal(err)
	}
	svc := StartService(t, q.bin, q.config, env...)
	q.waitVerified(5*time.Minute, svc)
	WaitFor(t, 2*time.Minute, time.Second, func() (bool, error) { return rec.saw("glue:CreateTable", "table/dms2iceberg/"), nil },
		"the dead-letter table to be created")
	if err := svc.Stop(90 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	// maintain (compaction, expiry, manifests, orphan listing) runs with the same role.
	args := append([]string{"maintain", "--config", q.config}, rec.tables()...)
	if out, stderr, err := RunCLIEnv(t, env, q.bin, args...); err != nil {
		t.Fatalf("maintain: %v\n%s\n%s", err, out, stderr)
	}

	wh, _ := catalog["warehouse"].(string)
	bucket, prefix, _ := strings.Cut(strings.TrimPrefix(wh, "s3://"), "/")
	doc, err := os.ReadFile(filepath.Join(RepoRoot(t), "docs", "deploy", "iam-policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	policy, err := iampolicy.Parse(doc, map[string]string{"REGION": rec.region, "ACCOUNT": testAccount,
		"STREAM": p.stream, "APPLICATION": q.app, "BUCKET": bucket, "PREFIX": prefix, "DATABASE": ns})
	if err != nil {
		t.Fatal(err)
	}
	checkCalls(t, policy, rec.calls, []string{"kinesis:GetRecords", "dynamodb:UpdateItem", "glue:UpdateTable", "s3:PutObject", "s3:ListBucket"})
}

// checkCalls fails t for every recorded call the policy does not allow, and when a call of
// each of must is missing (the recording would prove nothing).
func checkCalls(t *testing.T, policy *iampolicy.Policy, calls []awsCall, must []string) {
	t.Helper()
	seen := map[string]int{}
	denied := map[string]bool{}
	for _, c := range calls {
		seen[c.action]++
		for _, res := range c.resources {
			if ok, _ := policy.Allowed(c.action, res, c.keys); !ok {
				denied[fmt.Sprintf("%s (%s) on %s %v", c.action, c.op, res, c.keys)] = true
			}
		}
	}
	var actions []string
	for a, n := range seen {
		actions = append(actions, fmt.Sprintf("%s×%d", a, n))
	}
	sort.Strings(actions)
	t.Logf("recorded %d calls: %s", len(calls), strings.Join(actions, " "))
	for _, a := range must {
		if seen[a] == 0 {
			t.Errorf("no %s recorded: the recorder missed a client", a)
		}
	}
	var list []string
	for d := range denied {
		list = append(list, d)
	}
	sort.Strings(list)
	for _, d := range list {
		t.Errorf("not allowed by docs/deploy/iam-policy.json: %s", d)
	}
}
