package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink"
)

// recHookMetrics records what the hook reports.
type recHookMetrics struct {
	mu      sync.Mutex
	runs    map[string]int // "table result"
	dropped map[string]int
	queued  int
}

func newRecHookMetrics() *recHookMetrics {
	return &recHookMetrics{runs: map[string]int{}, dropped: map[string]int{}}
}

func (r *recHookMetrics) HookRan(table, result string, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[table+" "+result]++
}

func (r *recHookMetrics) HookDropped(table string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropped[table]++
}

func (r *recHookMetrics) HookQueued(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queued = n
}

func (r *recHookMetrics) snapshot() (map[string]int, map[string]int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	runs, dropped := map[string]int{}, map[string]int{}
	for k, v := range r.runs {
		runs[k] = v
	}
	for k, v := range r.dropped {
		dropped[k] = v
	}
	return runs, dropped, r.queued
}

func hookConfig() PostCommitConfig {
	return PostCommitConfig{Timeout: 10 * time.Second, QueueLength: 100}
}

// runHook queues the commits, closes the hook and runs it to completion.
func runHook(t *testing.T, h *postCommitHook, commits ...sink.CommitInfo) {
	t.Helper()
	for _, c := range commits {
		h.Notify(c)
	}
	h.Close()
	if err := h.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestHookCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := hookConfig()
	cfg.Command = []string{"sh", "-c", `echo "$DMS2ICEBERG_TABLE $DMS2ICEBERG_SNAPSHOT_ID $DMS2ICEBERG_SOURCE $DMS2ICEBERG_ROWS $DMS2ICEBERG_DELETES" >> "$1"`, "hook", out}
	m := newRecHookMetrics()
	h := newPostCommitHook(cfg, zap.NewNop(), m)
	runHook(t, h,
		sink.CommitInfo{Table: "shop.orders", Source: "src.orders", SnapshotID: 9007199254740993, Rows: 3, Deletes: 1},
		sink.CommitInfo{Table: "shop.items", Source: "src.items", SnapshotID: 7, Rows: 1})
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := "shop.orders 9007199254740993 src.orders 3 1\nshop.items 7 src.items 1 0\n"
	if string(b) != want {
		t.Fatalf("hook command saw:\n%s\nwant:\n%s", b, want)
	}
	runs, dropped, queued := m.snapshot()
	if runs["shop.orders ok"] != 1 || runs["shop.items ok"] != 1 || len(dropped) != 0 || queued != 0 {
		t.Fatalf("runs %v dropped %v queued %d", runs, dropped, queued)
	}
}

func TestHookCommandFailureIsCountedNotFatal(t *testing.T) {
	cfg := hookConfig()
	cfg.Command = []string{"sh", "-c", "echo nope >&2; exit 3"}
	m := newRecHookMetrics()
	h := newPostCommitHook(cfg, zap.NewNop(), m)
	runHook(t, h, sink.CommitInfo{Table: "shop.orders", SnapshotID: 1})
	if runs, _, _ := m.snapshot(); runs["shop.orders error"] != 1 {
		t.Fatalf("runs %v, want one error", runs)
	}
	cfg.Command = []string{filepath.Join(t.TempDir(), "missing")}
	h = newPostCommitHook(cfg, zap.NewNop(), m)
	runHook(t, h, sink.CommitInfo{Table: "shop.orders", SnapshotID: 1})
	if runs, _, _ := m.snapshot(); runs["shop.orders error"] != 2 {
		t.Fatalf("runs %v, want two errors", runs)
	}
}

func TestHookCommandTimeout(t *testing.T) {
	cfg := hookConfig()
	cfg.Timeout = 200 * time.Millisecond
	// The child (sleep) inherits the output pipe: only killing the process group ends the run.
	cfg.Command = []string{"sh", "-c", "sleep 60 & wait"}
	m := newRecHookMetrics()
	h := newPostCommitHook(cfg, zap.NewNop(), m)
	runHook(t, h, sink.CommitInfo{Table: "shop.orders", SnapshotID: 1})
	if runs, _, _ := m.snapshot(); runs["shop.orders timeout"] != 1 {
		t.Fatalf("runs %v, want one timeout", runs)
	}
}

func TestHookURL(t *testing.T) {
	var mu sync.Mutex
	var got []hookEvent
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev hookEvent
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, ev)
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		if ev.Table == "shop.bad" {
			http.Error(w, "no such table", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	cfg := hookConfig()
	cfg.URL = srv.URL + "/refresh"
	cfg.Headers = map[string]string{"Authorization": "Bearer t"}
	m := newRecHookMetrics()
	h := newPostCommitHook(cfg, zap.NewNop(), m)
	runHook(t, h,
		sink.CommitInfo{Table: "shop.orders", Source: "src.orders", SnapshotID: 9007199254740993, Rows: 2, Deletes: 1},
		sink.CommitInfo{Table: "shop.bad", SnapshotID: 5})
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].Table != "shop.orders" || got[0].SnapshotID != "9007199254740993" || got[0].Source != "src.orders" ||
		got[0].Rows != 2 || got[0].Deletes != 1 || got[0].Committed.IsZero() || auth[0] != "Bearer t" {
		t.Fatalf("server received %+v (auth %q)", got, auth)
	}
	runs, _, _ := m.snapshot()
	if runs["shop.orders ok"] != 1 || runs["shop.bad error"] != 1 {
		t.Fatalf("runs %v", runs)
	}
}

func TestHookURLTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	cfg := hookConfig()
	cfg.URL = srv.URL
	cfg.Timeout = 100 * time.Millisecond
	m := newRecHookMetrics()
	h := newPostCommitHook(cfg, zap.NewNop(), m)
	runHook(t, h, sink.CommitInfo{Table: "shop.orders", SnapshotID: 1})
	if runs, _, _ := m.snapshot(); runs["shop.orders timeout"] != 1 {
		t.Fatalf("runs %v, want one timeout", runs)
	}
}

// queued returns the pending notifications as "table@snapshot".
func (h *postCommitHook) pending() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, ev := range h.queue {
		out = append(out, ev.Table+"@"+ev.SnapshotID)
	}
	return out
}

func TestHookQueueOverflowDropsOldestOfTheSameTable(t *testing.T) {
	cfg := hookConfig()
	cfg.QueueLength = 3
	cfg.Command = []string{"true"}
	m := newRecHookMetrics()
	h := newPostCommitHook(cfg, zap.NewNop(), m)
	// No worker runs yet: Notify must never block, whatever the queue holds.
	h.Notify(sink.CommitInfo{Table: "a", SnapshotID: 1})
	h.Notify(sink.CommitInfo{Table: "b", SnapshotID: 1})
	h.Notify(sink.CommitInfo{Table: "a", SnapshotID: 2})
	h.Notify(sink.CommitInfo{Table: "a", SnapshotID: 3}) // full: a@1 goes
	if got, want := strings.Join(h.pending(), " "), "b@1 a@2 a@3"; got != want {
		t.Fatalf("queue %q, want %q", got, want)
	}
	h.Notify(sink.CommitInfo{Table: "c", SnapshotID: 1}) // full, no c pending: the oldest (b@1) goes
	if got, want := strings.Join(h.pending(), " "), "a@2 a@3 c@1"; got != want {
		t.Fatalf("queue %q, want %q", got, want)
	}
	h.Notify(sink.CommitInfo{Table: "a", SnapshotID: 4}) // full: a@2 goes; latest of a stays
	if got, want := strings.Join(h.pending(), " "), "a@3 c@1 a@4"; got != want {
		t.Fatalf("queue %q, want %q", got, want)
	}
	_, dropped, queued := m.snapshot()
	if dropped["a"] != 2 || dropped["b"] != 1 || queued != 3 {
		t.Fatalf("dropped %v queued %d", dropped, queued)
	}
	runHook(t, h)
	runs, _, queued := m.snapshot()
	if runs["a ok"] != 2 || runs["c ok"] != 1 || queued != 0 {
		t.Fatalf("runs %v queued %d", runs, queued)
	}
}

func TestHookShutdownDropsWhatIsLeft(t *testing.T) {
	cfg := hookConfig()
	cfg.Command = []string{"true"}
	m := newRecHookMetrics()
	h := newPostCommitHook(cfg, zap.NewNop(), m)
	h.Notify(sink.CommitInfo{Table: "a", SnapshotID: 1})
	h.Notify(sink.CommitInfo{Table: "b", SnapshotID: 1})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := h.Run(ctx); err != nil {
		t.Fatal(err)
	}
	h.Notify(sink.CommitInfo{Table: "c", SnapshotID: 1}) // after the end: counted, not queued
	runs, dropped, queued := m.snapshot()
	if len(runs) != 0 || dropped["a"] != 1 || dropped["b"] != 1 || dropped["c"] != 1 || queued != 0 || len(h.pending()) != 0 {
		t.Fatalf("runs %v dropped %v queued %d pending %v", runs, dropped, queued, h.pending())
	}
}

func TestHookRunsWhileNotified(t *testing.T) {
	cfg := hookConfig()
	cfg.Command = []string{"true"}
	m := newRecHookMetrics()
	h := newPostCommitHook(cfg, zap.NewNop(), m)
	done := make(chan error, 1)
	go func() { done <- h.Run(t.Context()) }()
	for i := range 5 {
		h.Notify(sink.CommitInfo{Table: "a", SnapshotID: int64(i)})
	}
	h.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	runs, dropped, _ := m.snapshot()
	if runs["a ok"] != 5 || len(dropped) != 0 {
		t.Fatalf("runs %v dropped %v", runs, dropped)
	}
}
