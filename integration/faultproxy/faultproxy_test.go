package faultproxy

import (
	"context"
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
)

// upstream is a dependency that applies every request it receives (a "commit") and records it.
type upstream struct {
	mu      sync.Mutex
	applied []string // method path?query body host
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.applied = append(u.applied, r.Method+" "+r.URL.RequestURI()+" "+string(b)+" "+r.Host)
	u.mu.Unlock()
	w.Header().Set("X-Upstream", "yes")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "applied "+r.URL.Path)
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.applied)
}

func start(t *testing.T, rules ...Rule) (*Proxy, *upstream) {
	t.Helper()
	up := &upstream{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	p, err := New(srv.URL, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	p.SetRules(rules...)
	return p, up
}

// do sends one request on a fresh connection (no keep-alive, so that the client's transport
// never replays it on another connection) and returns the status and body, or the error.
func do(t *testing.T, timeout time.Duration, method, url, body string) (int, string, error) {
	t.Helper()
	cl := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func only(k Kind) Rule {
	return Rule{Name: string(k), Method: http.MethodPost, Path: regexp.MustCompile(`^/v1/namespaces/[^/]+/tables/[^/]+$`),
		Kinds: []Kind{k}, Prob: 1, Hold: 200 * time.Millisecond}
}

const commitPath = "/v1/namespaces/ns/tables/t"

// TestForwardsUnchanged: without a fault the request reaches the upstream as sent (method, raw
// path and query, body, Host header: SigV4 signs the Host) and the answer comes back whole.
func TestForwardsUnchanged(t *testing.T) {
	p, up := start(t, only(KindReset)) // the rule matches only POSTs to a table
	status, body, err := do(t, 5*time.Second, http.MethodPut, p.URL()+"/bucket/a%2Fb.parquet?x=1&y=2", "data")
	if err != nil || status != http.StatusOK || body != "applied /bucket/a/b.parquet" {
		t.Fatalf("forwarded PUT: %d %q %v", status, body, err)
	}
	want := "PUT /bucket/a%2Fb.parquet?x=1&y=2 data " + strings.TrimPrefix(p.URL(), "http://")
	if got := up.applied[0]; got != want {
		t.Fatalf("upstream got %q, want %q (the Host header must be the proxy's, as the client signed it)", got, want)
	}
	if p.Total() != 0 || p.Forwarded() != 1 {
		t.Fatalf("total %d forwarded %d", p.Total(), p.Forwarded())
	}
}

// TestEachKind proves every kind of fault is injected and has the effect it names: what the
// client sees and whether the dependency applied the request.
func TestEachKind(t *testing.T) {
	cases := []struct {
		kind        Kind
		wantStatus  int  // 0: the client gets an error, no answer
		wantApplied bool // the upstream applied the request
	}{
		{KindStatus, http.StatusServiceUnavailable, false},
		{KindTimeout, 0, false},
		{KindReset, 0, false},
		{KindLost, 0, true},
		{KindLost5xx, http.StatusBadGateway, true},
	}
	for _, c := range cases {
		t.Run(string(c.kind), func(t *testing.T) {
			p, up := start(t, only(c.kind))
			began := time.Now()
			status, body, err := do(t, 5*time.Second, http.MethodPost, p.URL()+commitPath, `{"updates":[]}`)
			switch {
			case c.wantStatus == 0 && err == nil:
				t.Fatalf("want a failed request, got %d %q", status, body)
			case c.wantStatus == 0 && !IsInjected(err):
				t.Fatalf("want a connection error, got %v", err)
			case c.wantStatus != 0 && (err != nil || status != c.wantStatus):
				t.Fatalf("want status %d, got %d %v", c.wantStatus, status, err)
			case c.wantStatus != 0 && !strings.Contains(body, `"code":`+strconv.Itoa(c.wantStatus)):
				t.Fatalf("want a REST error body, got %q", body)
			}
			if c.kind == KindTimeout && time.Since(began) < 150*time.Millisecond {
				t.Fatalf("timeout answered after %s, want the request held", time.Since(began))
			}
			if applied := up.count() == 1; applied != c.wantApplied {
				t.Fatalf("upstream applied the request: %v, want %v", applied, c.wantApplied)
			}
			if got := p.Counts()[c.kind]; got != 1 || p.Total() != 1 || len(p.Events()) != 1 || p.Events()[0].Rule != string(c.kind) {
				t.Fatalf("counts %v, events %v", p.Counts(), p.Events())
			}
			if c.wantApplied && p.Events()[0].Upstream != http.StatusOK {
				t.Fatalf("event %+v: want the upstream's status recorded", p.Events()[0])
			}
			// The next request on a new connection goes through (the rule has no Max, so
			// disable it).
			p.Enable(false)
			if status, _, err := do(t, 5*time.Second, http.MethodPost, p.URL()+commitPath, "{}"); err != nil || status != http.StatusOK {
				t.Fatalf("after the fault: %d %v", status, err)
			}
		})
	}
}

// TestTimeoutEndsWhenClientGivesUp: a held request ends when the client's own timeout fires,
// and the client sees a timeout.
func TestTimeoutEndsWhenClientGivesUp(t *testing.T) {
	r := only(KindTimeout)
	r.Hold = time.Minute
	p, up := start(t, r)
	_, _, err := do(t, 300*time.Millisecond, http.MethodPost, p.URL()+commitPath, "{}")
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("want a client timeout, got %v", err)
	}
	if up.count() != 0 {
		t.Fatal("a held request reached the upstream")
	}
}

// TestSkipMaxProb: Skip lets the first requests through, Max bounds the faults, Prob 0 injects
// none, and the draws replay for the same seed.
func TestSkipMaxProb(t *testing.T) {
	r := only(KindStatus)
	r.Skip, r.Max = 2, 3
	p, _ := start(t, r)
	var got []int
	for range 8 {
		status, _, err := do(t, 5*time.Second, http.MethodPost, p.URL()+commitPath, "{}")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, status)
	}
	want := []int{200, 200, 503, 503, 503, 200, 200, 200}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statuses %v, want %v", got, want)
		}
	}
	r = only(KindStatus)
	r.Prob = 0
	p.SetRules(r)
	if status, _, _ := do(t, 5*time.Second, http.MethodPost, p.URL()+commitPath, "{}"); status != 200 {
		t.Fatalf("Prob 0 injected: %d", status)
	}
	draws := func() string {
		q, _ := start(t, Rule{Name: "half", Kinds: Kinds, Prob: 0.5, Hold: 10 * time.Millisecond})
		for range 20 {
			_, _, _ = do(t, 5*time.Second, http.MethodGet, q.URL()+"/x", "")
		}
		var b strings.Builder
		for _, e := range q.Events() {
			b.WriteString(string(e.Kind) + ",")
		}
		return b.String()
	}
	if a, b := draws(), draws(); a != b || a == "" {
		t.Fatalf("the same seed drew %q and %q", a, b)
	}
}

// TestS3ErrorBody: outside /v1/ an injected 5xx carries an S3 error document.
func TestS3ErrorBody(t *testing.T) {
	p, _ := start(t, Rule{Name: "s3", Method: http.MethodPut, Kinds: []Kind{KindStatus}, Prob: 1})
	status, body, err := do(t, 5*time.Second, http.MethodPut, p.URL()+"/bucket/key", "x")
	if err != nil || status != 503 || !strings.Contains(body, "<Code>ServiceUnavailable</Code>") {
		t.Fatalf("%d %q %v", status, body, err)
	}
}
