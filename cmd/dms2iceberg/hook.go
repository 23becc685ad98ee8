package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink"
)

// hookMetrics receives the post-commit hook's measurements.
type hookMetrics interface {
	// HookRan counts one run with its result: "ok", "error" or "timeout".
	HookRan(table, result string, took time.Duration)
	// HookDropped counts a notification dropped (queue full, or pending at shutdown).
	HookDropped(table string)
	// HookQueued reports the number of pending notifications.
	HookQueued(n int)
}

type nopHookMetrics struct{}

func (nopHookMetrics) HookRan(string, string, time.Duration) {}
func (nopHookMetrics) HookDropped(string)                    {}
func (nopHookMetrics) HookQueued(int)                        {}

// hookEvent is one commit to notify.
type hookEvent struct {
	Table      string    `json:"table"`
	Source     string    `json:"source"`
	SnapshotID string    `json:"snapshot_id"` // decimal: an int64 id does not fit a JSON double
	Rows       int       `json:"rows"`
	Deletes    int       `json:"deletes"`
	Committed  time.Time `json:"committed_at"`
}

// postCommitHook runs the configured command and/or HTTP call after each table commit. Notify
// is called on the table writers' goroutines and never blocks; Run is the one worker goroutine
// that executes the notifications in order, one at a time.
//
// The queue is bounded: when it is full, Notify drops the oldest pending notification of the
// same table (the new one carries a later snapshot of it: latest snapshot wins), or, when the
// table has none pending, the oldest notification of any table. Drops are counted.
type postCommitHook struct {
	cfg     PostCommitConfig
	log     *zap.Logger
	metrics hookMetrics
	client  *http.Client
	now     func() time.Time

	mu     sync.Mutex
	queue  []hookEvent
	closed bool
	wake   chan struct{} // capacity 1: "the queue changed"
}

func newPostCommitHook(cfg PostCommitConfig, log *zap.Logger, m hookMetrics) *postCommitHook {
	if m == nil {
		m = nopHookMetrics{}
	}
	return &postCommitHook{cfg: cfg, log: log.Named("post_commit"), metrics: m,
		client: &http.Client{}, now: time.Now, wake: make(chan struct{}, 1)}
}

// Notify queues a notification for a commit. It never blocks.
func (h *postCommitHook) Notify(c sink.CommitInfo) {
	ev := hookEvent{Table: c.Table, Source: c.Source, SnapshotID: strconv.FormatInt(c.SnapshotID, 10),
		Rows: c.Rows, Deletes: c.Deletes, Committed: h.now().UTC()}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.metrics.HookDropped(ev.Table)
		return
	}
	var dropped string
	if len(h.queue) >= h.cfg.QueueLength {
		victim := 0
		for i := range h.queue {
			if h.queue[i].Table == ev.Table {
				victim = i
				break
			}
		}
		dropped = h.queue[victim].Table
		h.queue = append(h.queue[:victim], h.queue[victim+1:]...)
	}
	h.queue = append(h.queue, ev)
	n := len(h.queue)
	h.mu.Unlock()
	if dropped != "" {
		h.metrics.HookDropped(dropped)
		h.log.Warn("post-commit queue full: dropped the oldest pending notification", zap.String("dropped_table", dropped),
			zap.String("table", ev.Table))
	}
	h.metrics.HookQueued(n)
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Close stops intake; Run returns once it has run what is queued.
func (h *postCommitHook) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// next pops the oldest notification; ok is false when the queue is empty.
func (h *postCommitHook) next() (hookEvent, bool, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue) == 0 {
		return hookEvent{}, false, h.closed
	}
	ev := h.queue[0]
	h.queue[0] = hookEvent{}
	h.queue = h.queue[1:]
	h.metrics.HookQueued(len(h.queue))
	return ev, true, h.closed
}

// Run executes notifications until Close has been called and the queue is empty, or ctx ends
// (what is still queued is then dropped and counted). It always returns nil: hook failures are
// never fatal.
func (h *postCommitHook) Run(ctx context.Context) error {
	for {
		ev, ok, closed := h.next()
		if !ok {
			if closed {
				return nil
			}
			select {
			case <-h.wake:
				continue
			case <-ctx.Done():
				h.dropAll()
				return nil
			}
		}
		if ctx.Err() != nil {
			h.requeueFront(ev)
			h.dropAll()
			return nil
		}
		h.run(ctx, ev)
	}
}

func (h *postCommitHook) requeueFront(ev hookEvent) {
	h.mu.Lock()
	h.queue = append([]hookEvent{ev}, h.queue...)
	h.mu.Unlock()
}

func (h *postCommitHook) dropAll() {
	h.mu.Lock()
	q := h.queue
	h.queue, h.closed = nil, true
	h.mu.Unlock()
	for _, ev := range q {
		h.metrics.HookDropped(ev.Table)
	}
	if len(q) > 0 {
		h.log.Warn("shutdown: post-commit notifications not run", zap.Int("dropped", len(q)))
	}
	h.metrics.HookQueued(0)
}

// run executes one notification: the command, then the POST, each bounded by the timeout.
func (h *postCommitHook) run(ctx context.Context, ev hookEvent) {
	start := time.Now()
	var errs []error
	timedOut := false
	if len(h.cfg.Command) > 0 {
		if err := h.runCommand(ctx, ev); err != nil {
			errs = append(errs, err)
			timedOut = timedOut || errors.Is(err, context.DeadlineExceeded)
		}
	}
	if h.cfg.URL != "" {
		if err := h.post(ctx, ev); err != nil {
			errs = append(errs, err)
			timedOut = timedOut || errors.Is(err, context.DeadlineExceeded)
		}
	}
	took := time.Since(start)
	result := "ok"
	switch {
	case timedOut:
		result = "timeout"
	case len(errs) > 0:
		result = "error"
	}
	h.metrics.HookRan(ev.Table, result, took)
	if err := errors.Join(errs...); err != nil {
		h.log.Warn("post-commit hook failed", zap.String("table", ev.Table), zap.String("snapshot", ev.SnapshotID),
			zap.String("result", result), zap.Duration("took", took), zap.Error(err))
		return
	}
	h.log.Debug("post-commit hook ran", zap.String("table", ev.Table), zap.String("snapshot", ev.SnapshotID),
		zap.Duration("took", took))
}

func (h *postCommitHook) runCommand(ctx context.Context, ev hookEvent) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.cfg.Command[0], h.cfg.Command[1:]...)
	cmd.Env = append(os.Environ(),
		"DMS2ICEBERG_TABLE="+ev.Table,
		"DMS2ICEBERG_SOURCE="+ev.Source,
		"DMS2ICEBERG_SNAPSHOT_ID="+ev.SnapshotID,
		"DMS2ICEBERG_ROWS="+strconv.Itoa(ev.Rows),
		"DMS2ICEBERG_DELETES="+strconv.Itoa(ev.Deletes),
		"DMS2ICEBERG_COMMITTED_AT="+ev.Committed.Format(time.RFC3339Nano))
	out := &tailBuffer{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so a timeout also ends what a script started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("command %s: timed out after %s: %w (output: %q)", h.cfg.Command[0], h.cfg.Timeout, context.DeadlineExceeded, out.String())
	}
	if err != nil {
		return fmt.Errorf("command %s: %w (output: %q)", h.cfg.Command[0], err, out.String())
	}
	return nil
}

func (h *postCommitHook) post(ctx context.Context, ev hookEvent) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("post-commit request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "dms2iceberg")
	for k, v := range h.cfg.Headers {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("POST %s: timed out after %s: %w", req.URL.Redacted(), h.cfg.Timeout, context.DeadlineExceeded)
		}
		return fmt.Errorf("POST %s: %w", req.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("POST %s: %s: %q", req.URL.Redacted(), resp.Status, snippet)
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}
