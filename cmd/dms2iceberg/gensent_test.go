package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
)

// TestSenderSentLog: the sent log names every accepted record once, with its table, shard,
// sequence number and a send time no later than the answer, and no record that failed.
func TestSenderSentLog(t *testing.T) {
	msgs := synthetic(300, 7, 10)
	f := &fakeKinesis{fail: func(c, i int, _ workload.Message) bool { return c == 0 && i >= 150 }}
	s, _ := testSender(f)
	now := time.UnixMicro(1_000_000)
	s.now = func() time.Time { now = now.Add(time.Millisecond); return now }
	path := filepath.Join(t.TempDir(), "sent.tsv")
	closeLog, err := s.openSentLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.send(context.Background(), seqOf(msgs)); err != nil {
		t.Fatal(err)
	}
	if err := closeLog(); err != nil {
		t.Fatal(err)
	}
	if s.retried == 0 {
		t.Fatal("the test did not exercise a failed record")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != len(msgs) {
		t.Fatalf("%d lines for %d accepted records", len(lines), len(msgs))
	}
	for i, l := range lines {
		var table, shard string
		var seq, at int64
		if _, err := fmt.Sscanf(strings.ReplaceAll(l, "\t", " "), "%s %s %d %d", &table, &shard, &seq, &at); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		if table != "shop.t" || shard != "shardId-000000000000" || seq != int64(i+1) || at <= 1_000_000 || at > now.UnixMicro() {
			t.Fatalf("line %d: %q (want table shop.t, the fake's shard, sequence %d, a send time within the run)", i, l, i+1)
		}
	}
}
