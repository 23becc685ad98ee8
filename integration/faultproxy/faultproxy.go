// Package faultproxy is a small fault-injecting HTTP/1.1 reverse proxy for the integration tests:
// put in front of a dependency (the S3 emulator, the Iceberg REST catalog server), it forwards
// requests unchanged (the Host header included, so SigV4 signatures still match) and, on the
// requests its rules select, injects one of the faults a production dependency shows:
//
//   - KindStatus: a 5xx answer (503 by default) without forwarding: the dependency refused the
//     request and did nothing;
//   - KindTimeout: the request is read and held, never forwarded, until the client gives up or
//     Rule.Hold passes, and then the connection is reset: a dependency that does not answer;
//   - KindReset: the connection is reset before anything is forwarded;
//   - KindLost: the request is forwarded and the dependency's answer read in full, then the
//     connection is reset instead of answering: the request took effect (a commit landed, an
//     object was stored) but the client cannot know (the unknown-outcome path);
//   - KindLost5xx: the same, but the client gets a 502 instead of the answer (a gateway that
//     lost its upstream's answer; Iceberg's REST spec calls a 5xx on commit "state unknown").
//
// In front of an AWS JSON protocol service (DynamoDB, Kinesis: POST / with an X-Amz-Target
// header) rules also select by operation (Rule.Target) and have the service's own error answers
// (AWSKinds, awsjson.go): throttling, an expired shard iterator, and a PutRecords answer with
// failed entries. Their 5xx answers carry the protocol's JSON error body.
//
// Rules are matched in order; the first that matches a request and has budget left decides, by
// its probability, whether a fault is injected and draws its kind. The draw is seeded, so a
// single-client sequence replays; with concurrent clients the order of requests decides.
//
// Concurrency: a Proxy is safe for concurrent use; SetRules and Enable may be called while it
// serves.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kind is a kind of injected fault.
type Kind string

// The kinds of fault.
const (
	KindStatus  Kind = "5xx"
	KindTimeout Kind = "timeout"
	KindReset   Kind = "reset"
	KindLost    Kind = "lost-response"
	KindLost5xx Kind = "lost-response-5xx"
)

// Kinds lists every kind, in report order.
var Kinds = []Kind{KindStatus, KindTimeout, KindReset, KindLost, KindLost5xx}

// Rule selects requests and says which faults they get.
type Rule struct {
	// Name labels the rule in counts and events.
	Name string
	// Method matches the request method ("" any).
	Method string
	// Path matches the request path (nil any).
	Path *regexp.Regexp
	// Target matches the X-Amz-Target header of AWS JSON protocol requests, e.g.
	// `^DynamoDB_20120810\.UpdateItem$` or `^Kinesis_20131202\.GetRecords$` (nil any; a
	// request without the header has "" matched).
	Target *regexp.Regexp
	// Kinds are the faults drawn from, uniformly.
	Kinds []Kind
	// Prob is the chance that a matching request gets a fault (1: every one).
	Prob float64
	// Skip lets the first Skip matching requests through.
	Skip int
	// Max bounds the faults this rule injects (0: no bound).
	Max int
	// Status is the answer of KindStatus (default 503).
	Status int
	// Hold bounds how long KindTimeout holds a request (default 5 s).
	Hold time.Duration
	// FailEntries is the chance that each entry of a PutRecords request fails under
	// KindPartialPut (default 0.5); at least one entry fails.
	FailEntries float64

	matched, injected int
}

// Event is one injected fault.
type Event struct {
	Rule   string
	Kind   Kind
	Method string
	Path   string
	// Target is the request's X-Amz-Target header ("" outside the AWS JSON protocol).
	Target string
	// Upstream is the status the dependency answered before the answer was lost (KindLost,
	// KindLost5xx) or rewritten (KindPartialPut), 0 when nothing was forwarded or forwarding
	// failed.
	Upstream int
	// Failed is the number of PutRecords entries KindPartialPut failed (not forwarded).
	Failed int
}

// Proxy is a running proxy.
type Proxy struct {
	upstream *url.URL
	ln       net.Listener
	srv      *http.Server
	tr       *http.Transport

	mu         sync.Mutex
	rng        *rand.Rand
	rules      []*Rule
	enabled    bool
	forwarded  int
	counts     map[Kind]int
	byRule     map[string]int
	byRuleKind map[string]map[Kind]int
	events     []Event
	onInject   func(Event)
}

// Options configure New.
type Options struct {
	// Seed seeds the draws.
	Seed uint64
	// OnInject, if set, is called (outside the proxy's lock) for every injected fault, before
	// the fault reaches the client.
	OnInject func(Event)
}

// New starts a proxy on a free loopback port that forwards to upstream (an http:// base URL).
// Faults are enabled; there are no rules until SetRules.
func New(upstream string, o Options) (*Proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream %q: %w", upstream, err)
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: upstream %q: want http://host:port", upstream)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{upstream: u, ln: ln, enabled: true, rng: rand.New(rand.NewPCG(o.Seed, 0x5eed)),
		counts: map[Kind]int{}, byRule: map[string]int{}, byRuleKind: map[string]map[Kind]int{}, onInject: o.OnInject,
		tr: &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 64,
			IdleConnTimeout: 30 * time.Second, ResponseHeaderTimeout: 2 * time.Minute}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's base URL (http://127.0.0.1:port).
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	p.tr.CloseIdleConnections()
	return err
}

// SetRules replaces the rules (their counters start at zero).
func (p *Proxy) SetRules(rules ...Rule) {
	rs := make([]*Rule, len(rules))
	for i := range rules {
		r := rules[i]
		r.matched, r.injected = 0, 0
		rs[i] = &r
	}
	p.mu.Lock()
	p.rules = rs
	p.mu.Unlock()
}

// Enable turns fault injection on or off; the proxy forwards everything while it is off.
func (p *Proxy) Enable(on bool) {
	p.mu.Lock()
	p.enabled = on
	p.mu.Unlock()
}

// Counts returns the faults injected so far by kind.
func (p *Proxy) Counts() map[Kind]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[Kind]int, len(p.counts))
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}

// Total is the number of faults injected so far.
func (p *Proxy) Total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.counts {
		n += v
	}
	return n
}

// Forwarded is the number of requests whose answer reached the client unchanged.
func (p *Proxy) Forwarded() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.forwarded
}

// Events returns the injected faults in order.
func (p *Proxy) Events() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Event(nil), p.events...)
}

// Summary formats the counts as "kind=n ..." in Kinds order, followed by the AWSKinds that a
// rule names or that were injected.
func (p *Proxy) Summary() string {
	c := p.Counts()
	named := map[Kind]bool{}
	p.mu.Lock()
	for _, r := range p.rules {
		for _, k := range r.Kinds {
			named[k] = true
		}
	}
	p.mu.Unlock()
	parts := make([]string, 0, len(Kinds)+len(AWSKinds))
	for _, k := range Kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
	}
	for _, k := range AWSKinds {
		if named[k] || c[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, c[k]))
		}
	}
	return strings.Join(parts, " ")
}

// CountsByRule returns the faults injected so far by rule name and kind.
func (p *Proxy) CountsByRule() map[string]map[Kind]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]map[Kind]int, len(p.byRuleKind))
	for name, byKind := range p.byRuleKind {
		m := make(map[Kind]int, len(byKind))
		for k, v := range byKind {
			m[k] = v
		}
		out[name] = m
	}
	return out
}

// SummaryByRule formats the faults per rule as "rule=n ...", sorted by rule name.
func (p *Proxy) SummaryByRule() string {
	p.mu.Lock()
	names := make([]string, 0, len(p.byRule))
	for n := range p.byRule {
		names = append(names, n)
	}
	counts := make(map[string]int, len(p.byRule))
	for n, v := range p.byRule {
		counts[n] = v
	}
	p.mu.Unlock()
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s=%d", n, counts[n]))
	}
	return strings.Join(parts, " ")
}

// decide returns the rule and kind of the fault for r, or nil.
func (p *Proxy) decide(r *http.Request) (*Rule, Kind) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.enabled {
		return nil, ""
	}
	for _, rule := range p.rules {
		if !rule.selects(r) || rule.Max > 0 && rule.injected >= rule.Max || len(rule.Kinds) == 0 {
			continue
		}
		rule.matched++
		if rule.matched <= rule.Skip || p.rng.Float64() >= rule.Prob {
			return nil, ""
		}
		kind := rule.Kinds[p.rng.IntN(len(rule.Kinds))]
		if !appliesTo(kind, r) {
			return nil, "" // forwarded, and Max's budget kept
		}
		rule.injected++
		return rule, kind
	}
	return nil, ""
}

// selects reports whether r is one of the requests the rule is about.
func (rule *Rule) selects(r *http.Request) bool {
	return (rule.Method == "" || rule.Method == r.Method) &&
		(rule.Path == nil || rule.Path.MatchString(r.URL.Path)) &&
		(rule.Target == nil || rule.Target.MatchString(r.Header.Get(headerTarget)))
}

func (p *Proxy) record(e Event) {
	p.mu.Lock()
	p.counts[e.Kind]++
	p.byRule[e.Rule]++
	if p.byRuleKind[e.Rule] == nil {
		p.byRuleKind[e.Rule] = map[Kind]int{}
	}
	p.byRuleKind[e.Rule][e.Kind]++
	p.events = append(p.events, e)
	cb := p.onInject
	p.mu.Unlock()
	if cb != nil {
		cb(e)
	}
}

// ServeHTTP forwards r or injects the fault its rule draws.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rule, kind := p.decide(r)
	if rule == nil {
		p.forward(w, r)
		return
	}
	ev := Event{Rule: rule.Name, Kind: kind, Method: r.Method, Path: r.URL.Path, Target: r.Header.Get(headerTarget)}
	switch kind {
	case KindStatus:
		_, _ = io.Copy(io.Discard, r.Body)
		p.record(ev)
		status := rule.Status
		if status == 0 {
			status = http.StatusServiceUnavailable
		}
		writeError(w, r, status, "injected by faultproxy")
	case KindTimeout:
		_, _ = io.Copy(io.Discard, r.Body)
		p.record(ev)
		hold := rule.Hold
		if hold <= 0 {
			hold = 5 * time.Second
		}
		t := time.NewTimer(hold)
		select {
		case <-r.Context().Done(): // the client gave up
		case <-t.C:
		}
		t.Stop()
		reset(w)
	case KindReset:
		p.record(ev)
		reset(w)
	case KindLost, KindLost5xx:
		resp, err := p.roundTrip(r)
		if err == nil {
			ev.Upstream = resp.StatusCode
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		p.record(ev)
		if kind == KindLost5xx {
			writeError(w, r, http.StatusBadGateway, "upstream answer lost by faultproxy")
			return
		}
		reset(w)
	case KindThroughput, KindThrottling, KindExpiredIterator:
		_, _ = io.Copy(io.Discard, r.Body)
		p.record(ev)
		writeAWSError(w, r, injectedAWSError(kind, ev.Target))
	case KindPartialPut:
		p.partialPut(w, r, rule, ev)
	default:
		p.forward(w, r)
	}
}

// hopHeaders are not forwarded (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// roundTrip sends r to the upstream unchanged: same method, path and query (raw), headers and
// Host header, and body.
func (p *Proxy) roundTrip(r *http.Request) (*http.Response, error) {
	body := r.Body
	if r.ContentLength == 0 {
		body = http.NoBody
	}
	return p.roundTripBody(r, body, r.ContentLength)
}

// roundTripBody sends r to the upstream as roundTrip does, with body (n bytes, -1 unknown)
// instead of r's.
func (p *Proxy) roundTripBody(r *http.Request, body io.Reader, n int64) (*http.Response, error) {
	u := *p.upstream
	u.Path, u.RawPath, u.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
	out, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, u.String(), body)
	if err != nil {
		return nil, err
	}
	out.URL.RawPath = r.URL.RawPath
	out.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Host = r.Host
	out.ContentLength = n
	return p.tr.RoundTrip(out)
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	resp, err := p.roundTrip(r)
	if err != nil {
		// The upstream failed by itself: a bad gateway, not an injected fault.
		writeError(w, r, http.StatusBadGateway, "faultproxy: upstream: "+err.Error())
		return
	}
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	p.mu.Lock()
	p.forwarded++
	p.mu.Unlock()
}

// reset aborts the connection with a TCP RST (SO_LINGER 0): the client reads "connection reset
// by peer" and no answer.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// writeError answers status with a body in the dependency's dialect: an AWS JSON protocol error
// for requests with an X-Amz-Target header, an Iceberg REST error (JSON) for paths under /v1/,
// an S3 error (XML) otherwise.
func writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if target := r.Header.Get(headerTarget); target != "" {
		writeAWSError(w, r, serverAWSError(status, target, msg))
		return
	}
	var b bytes.Buffer
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(&b, `{"error":{"message":%q,"type":"ServiceFailureException","code":%d}}`, msg, status)
	} else {
		w.Header().Set("Content-Type", "application/xml")
		code := "InternalError"
		if status == http.StatusServiceUnavailable {
			code = "ServiceUnavailable"
		}
		fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, msg)
	}
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// IsInjected reports whether err looks like what a client sees of an injected connection fault
// (reset or closed connection), for tests that expect one.
func IsInjected(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "EOF")
}
