package iampolicy

import (
	"os"
	"path/filepath"
	"testing"
)

const doc = `{"Version": "2012-10-17", "Statement": [
  {"Sid": "Read", "Effect": "Allow", "Action": ["kinesis:Get*", "kinesis:ListShards"],
   "Resource": "arn:aws:kinesis:REGION:ACCOUNT:stream/STREAM"},
  {"Sid": "List", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::BUCKET",
   "Condition": {"StringLike": {"s3:prefix": ["PREFIX", "PREFIX/*"]}}},
  {"Sid": "Objects", "Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::BUCKET/PREFIX/*"}
]}`

var subst = map[string]string{"REGION": "us-east-1", "ACCOUNT": "123456789012", "STREAM": "st", "BUCKET": "b", "PREFIX": "wh"}

func TestAllowed(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(doc), subst)
	if err != nil {
		t.Fatal(err)
	}
	stream := "arn:aws:kinesis:us-east-1:123456789012:stream/st"
	for _, c := range []struct {
		action, resource string
		keys             map[string]string
		want             bool
	}{
		{"kinesis:GetRecords", stream, nil, true},       // action wildcard
		{"KINESIS:getshardIterator", stream, nil, true}, // action names are case-insensitive
		{"kinesis:ListShards", stream, nil, true},
		{"kinesis:PutRecords", stream, nil, false},       // absent: denied
		{"kinesis:GetRecords", stream + "2", nil, false}, // another stream
		{"kinesis:GetRecords", "arn:aws:kinesis:eu-west-1:123456789012:stream/st", nil, false},
		{"s3:GetObject", "arn:aws:s3:::b/wh/ns.db/t/metadata/x.json", nil, true}, // resource wildcard across "/"
		{"s3:GetObject", "arn:aws:s3:::b/other/x", nil, false},
		{"s3:PutObject", "arn:aws:s3:::b/wh/x", nil, false},
		{"s3:ListBucket", "arn:aws:s3:::b", map[string]string{"s3:prefix": "wh/ns.db/"}, true},
		{"s3:ListBucket", "arn:aws:s3:::b", map[string]string{"s3:prefix": "other/"}, false},
		{"s3:ListBucket", "arn:aws:s3:::b", nil, false}, // the condition's key is missing
	} {
		if got, _ := p.Allowed(c.action, c.resource, c.keys); got != c.want {
			t.Errorf("Allowed(%s, %s, %v) = %v, want %v", c.action, c.resource, c.keys, got, c.want)
		}
	}
}

// Removing an action from a statement denies it (deny by absence), while the others stay allowed.
func TestRemovedActionIsDenied(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(doc), subst)
	if err != nil {
		t.Fatal(err)
	}
	stream := "arn:aws:kinesis:us-east-1:123456789012:stream/st"
	p.Statements[0].Actions = []string{"kinesis:GetRecords"}
	if ok, _ := p.Allowed("kinesis:ListShards", stream, nil); ok {
		t.Fatal("a removed action is still allowed")
	}
	if ok, sid := p.Allowed("kinesis:GetRecords", stream, nil); !ok || sid != "Read" {
		t.Fatalf("GetRecords = %v (%s), want allowed by Read", ok, sid)
	}
}

func TestPlaceholdersAreWholeWords(t *testing.T) {
	t.Parallel()
	// PREFIXES is another word; placeholders are upper case, so a lower-case letter ends a word.
	if got := replace(`"arn:aws:s3:::BUCKET/PREFIX/*" PREFIXES xPREFIX`, subst); got != `"arn:aws:s3:::b/wh/*" PREFIXES xwh` {
		t.Fatalf("replace = %q", got)
	}
}

// The shipped policy parses and grants the service's core calls.
func TestShippedPolicyParses(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "deploy", "iam-policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(b, map[string]string{"REGION": "us-east-1", "ACCOUNT": "1", "STREAM": "s", "APPLICATION": "a",
		"BUCKET": "b", "PREFIX": "wh", "DATABASE": "db"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := p.Allowed("kinesis:GetRecords", "arn:aws:kinesis:us-east-1:1:stream/s", nil); !ok {
		t.Fatal("the shipped policy does not grant kinesis:GetRecords on the stream")
	}
	if ok, _ := p.Allowed("glue:DeleteTable", "arn:aws:glue:us-east-1:1:table/db/t", nil); ok {
		t.Fatal("the shipped policy grants glue:DeleteTable")
	}
}
