package faultproxy

// Faults of the AWS JSON protocol (DynamoDB, Kinesis): every request is a POST / naming its
// operation in the X-Amz-Target header ("DynamoDB_20120810.UpdateItem",
// "Kinesis_20131202.GetRecords"), and every error is an answer whose JSON body names the error
// in "__type" ("com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException" for
// DynamoDB, the bare name for Kinesis). The AWS SDK takes the name after the last '#' as the
// error code and decodes the modelled ones into their types (*types.ExpiredIteratorException).
//
// The faults here are answers the real services give, so that a client sees what production
// shows, including what the SDK's retryer does with them (it retries throttling and 5xx).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
)

// The kinds of fault of the AWS JSON protocol.
const (
	// KindThroughput answers HTTP 400 ProvisionedThroughputExceededException without
	// forwarding: DynamoDB's table or Kinesis's shard throughput was exceeded.
	KindThroughput Kind = "throughput-exceeded"
	// KindThrottling answers HTTP 400 ThrottlingException without forwarding: DynamoDB's
	// request-rate throttling (on-demand tables, control-plane calls).
	KindThrottling Kind = "throttling"
	// KindExpiredIterator answers HTTP 400 ExpiredIteratorException without forwarding:
	// Kinesis GetRecords with a shard iterator older than five minutes.
	KindExpiredIterator Kind = "expired-iterator"
	// KindPartialPut answers a Kinesis PutRecords with some entries failed with
	// ProvisionedThroughputExceededException (HTTP 200, FailedRecordCount raised). Stored
	// entries cannot be unstored, so the failure is made true before forwarding: the failing
	// entries are dropped from the request, only the others are forwarded, and the answer
	// gets the synthetic failed entries back at their indexes. The client thus sees exactly
	// the entries with a SequenceNumber stored, and the others not, as from Kinesis. Other
	// operations are forwarded unchanged (and count no fault, nor against Rule.Max).
	// The rewritten request keeps the client's SigV4 signature, which no longer matches its
	// body: the emulators do not check signatures, real Kinesis would refuse it.
	KindPartialPut Kind = "putrecords-partial"
)

// AWSKinds lists the kinds of the AWS JSON protocol, in report order. Kinds (the faults of any
// HTTP dependency: 5xx, timeout, reset, lost answers) apply to AWS JSON requests as well.
var AWSKinds = []Kind{KindThroughput, KindThrottling, KindExpiredIterator, KindPartialPut}

const (
	headerTarget = "X-Amz-Target"
	// dynamoPrefix starts the X-Amz-Target of DynamoDB operations; kinesisPrefix Kinesis's.
	dynamoPrefix  = "DynamoDB_20120810."
	kinesisPrefix = "Kinesis_20131202."
	// dynamoErrorNS prefixes DynamoDB's error types.
	dynamoErrorNS = "com.amazonaws.dynamodb.v20120810#"
	// codeThroughput is the error code of throughput exceeded, in both services.
	codeThroughput = "ProvisionedThroughputExceededException"
)

// DynamoDBTarget matches the X-Amz-Target of the DynamoDB operations ops (for Rule.Target),
// every operation when there is none: DynamoDBTarget("UpdateItem", "PutItem").
func DynamoDBTarget(ops ...string) *regexp.Regexp { return targetRegexp(dynamoPrefix, ops) }

// KinesisTarget matches the X-Amz-Target of the Kinesis operations ops (for Rule.Target),
// every operation when there is none: KinesisTarget("GetRecords").
func KinesisTarget(ops ...string) *regexp.Regexp { return targetRegexp(kinesisPrefix, ops) }

func targetRegexp(prefix string, ops []string) *regexp.Regexp {
	if len(ops) == 0 {
		return regexp.MustCompile(`^` + regexp.QuoteMeta(prefix))
	}
	quoted := make([]string, len(ops))
	for i, op := range ops {
		quoted[i] = regexp.QuoteMeta(op)
	}
	return regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `(` + strings.Join(quoted, "|") + `)$`)
}

// appliesTo reports whether kind can fault r: KindPartialPut only a Kinesis PutRecords; every
// other kind any request.
func appliesTo(kind Kind, r *http.Request) bool {
	return kind != KindPartialPut || r.Header.Get(headerTarget) == kinesisPrefix+"PutRecords"
}

// awsError is one error answer of the AWS JSON protocol.
type awsError struct {
	status int
	typ    string // the __type, with the service's namespace
	msg    string
}

// awsErrorType returns the __type of code as the service of target writes it.
func awsErrorType(target, code string) string {
	if strings.HasPrefix(target, dynamoPrefix) {
		return dynamoErrorNS + code
	}
	return code
}

// injectedAWSError is the answer of a kind of AWS JSON fault to an operation.
func injectedAWSError(kind Kind, target string) awsError {
	const tag = " (injected by faultproxy)"
	switch {
	case kind == KindThrottling:
		return awsError{http.StatusBadRequest, awsErrorType(target, "ThrottlingException"),
			"Rate of requests exceeds the allowed throughput." + tag}
	case kind == KindExpiredIterator:
		return awsError{http.StatusBadRequest, awsErrorType(target, "ExpiredIteratorException"),
			"Iterator expired. The iterator was created too far in the past; the tolerated delay is 300000 milliseconds." + tag}
	case strings.HasPrefix(target, dynamoPrefix):
		return awsError{http.StatusBadRequest, dynamoErrorNS + codeThroughput,
			"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API." + tag}
	default:
		return awsError{http.StatusBadRequest, codeThroughput, "Rate exceeded for shard." + tag}
	}
}

// serverAWSError is a 5xx answer of the service of target: ServiceUnavailable for 503; for
// other statuses DynamoDB's InternalServerError or the generic InternalFailure.
func serverAWSError(status int, target, msg string) awsError {
	switch {
	case status == http.StatusServiceUnavailable:
		return awsError{status, "ServiceUnavailable", msg}
	case strings.HasPrefix(target, dynamoPrefix):
		return awsError{status, dynamoErrorNS + "InternalServerError", msg}
	default:
		return awsError{status, "InternalFailure", msg}
	}
}

var requestSeq atomic.Int64

// awsContentType is the Content-Type of r's protocol version (the request's own).
func awsContentType(r *http.Request) string {
	if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/x-amz-json-") {
		return ct
	}
	if strings.HasPrefix(r.Header.Get(headerTarget), kinesisPrefix) {
		return "application/x-amz-json-1.1"
	}
	return "application/x-amz-json-1.0"
}

// writeAWSError answers e in the AWS JSON protocol. The connection stays open, as the services
// keep it (the request body has been read).
func writeAWSError(w http.ResponseWriter, r *http.Request, e awsError) {
	b, _ := json.Marshal(struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}{e.typ, e.msg})
	w.Header().Set("Content-Type", awsContentType(r))
	w.Header().Set("X-Amzn-Requestid", "faultproxy-"+strconv.FormatInt(requestSeq.Add(1), 10))
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

// putRecords is a PutRecords request or answer: its entries, and the other fields untouched.
type putRecords struct {
	fields  map[string]json.RawMessage
	records []json.RawMessage
}

func parsePutRecords(b []byte) (putRecords, error) {
	var pr putRecords
	if err := json.Unmarshal(b, &pr.fields); err != nil {
		return pr, err
	}
	if raw, ok := pr.fields["Records"]; ok {
		if err := json.Unmarshal(raw, &pr.records); err != nil {
			return pr, err
		}
	}
	return pr, nil
}

func (pr putRecords) marshal() []byte {
	out := make(map[string]json.RawMessage, len(pr.fields)+1)
	for k, v := range pr.fields {
		out[k] = v
	}
	recs, _ := json.Marshal(pr.records)
	out["Records"] = recs
	b, _ := json.Marshal(out)
	return b
}

// failedEntry is the answer entry of a PutRecords entry Kinesis refused for throughput.
var failedEntry = json.RawMessage(`{"ErrorCode":"` + codeThroughput +
	`","ErrorMessage":"Rate exceeded for shard (injected by faultproxy)."}`)

// drawFailures draws which of n entries fail, each with probability prob (default 0.5), at
// least one.
func (p *Proxy) drawFailures(n int, prob float64) []bool {
	if prob <= 0 {
		prob = 0.5
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fail := make([]bool, n)
	some := false
	for i := range fail {
		fail[i] = p.rng.Float64() < prob
		some = some || fail[i]
	}
	if !some {
		fail[p.rng.IntN(n)] = true
	}
	return fail
}

// partialPut injects KindPartialPut into r (see the kind): it forwards the entries that
// succeed and answers with the failing ones merged back at their indexes. A request that is
// not a PutRecords with entries, or whose forwarded part the upstream does not accept, gets
// the upstream's answer and counts no fault.
func (p *Proxy) partialPut(w http.ResponseWriter, r *http.Request, rule *Rule, ev Event) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, r, http.StatusBadGateway, "faultproxy: reading the request: "+err.Error())
		return
	}
	req, perr := parsePutRecords(body)
	if ev.Target != kinesisPrefix+"PutRecords" || perr != nil || len(req.records) == 0 {
		p.relay(w, r, body)
		return
	}
	fail := p.drawFailures(len(req.records), rule.FailEntries)
	kept := putRecords{fields: req.fields}
	for i, rec := range req.records {
		if !fail[i] {
			kept.records = append(kept.records, rec)
		}
	}
	ev.Failed = len(req.records) - len(kept.records)
	ans := putRecords{fields: map[string]json.RawMessage{}}
	header := http.Header{}
	if len(kept.records) > 0 {
		up, err := p.send(r, kept.marshal())
		if err != nil || up.status != http.StatusOK {
			p.answer(w, r, up, err)
			return
		}
		if ans, err = parsePutRecords(up.body); err != nil || len(ans.records) != len(kept.records) {
			writeError(w, r, http.StatusBadGateway, fmt.Sprintf("faultproxy: PutRecords answer of %d entries for %d: %v",
				len(ans.records), len(kept.records), err))
			return
		}
		ev.Upstream, header = up.status, up.header
	}
	merged, upFailed := mergePutRecords(ans, fail)
	ans.records = merged
	ans.fields["FailedRecordCount"] = json.RawMessage(strconv.Itoa(upFailed + ev.Failed))
	p.record(ev)
	out := ans.marshal()
	w.Header().Set("Content-Type", awsContentType(r))
	if id := header.Get("X-Amzn-Requestid"); id != "" {
		w.Header().Set("X-Amzn-Requestid", id)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// mergePutRecords puts the upstream's answer entries (for the entries not failed, in order) and
// failed entries at the indexes of fail, and returns them with the upstream's own failed count.
func mergePutRecords(up putRecords, fail []bool) ([]json.RawMessage, int) {
	upFailed := 0
	if raw, ok := up.fields["FailedRecordCount"]; ok {
		_ = json.Unmarshal(raw, &upFailed)
	}
	out := make([]json.RawMessage, len(fail))
	next := 0
	for i := range fail {
		if fail[i] {
			out[i] = failedEntry
			continue
		}
		out[i] = up.records[next]
		next++
	}
	return out, upFailed
}

// upstreamAnswer is an upstream's answer, read in full.
type upstreamAnswer struct {
	status int
	header http.Header
	body   []byte
}

// send forwards r with body and reads the upstream's answer in full.
func (p *Proxy) send(r *http.Request, body []byte) (upstreamAnswer, error) {
	resp, err := p.roundTripBody(r, bytes.NewReader(body), int64(len(body)))
	if err != nil {
		return upstreamAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return upstreamAnswer{resp.StatusCode, resp.Header, b}, err
}

// relay forwards r with body (already read) and passes the answer on unchanged.
func (p *Proxy) relay(w http.ResponseWriter, r *http.Request, body []byte) {
	a, err := p.send(r, body)
	p.answer(w, r, a, err)
}

// answer passes an upstream answer on unchanged (a forwarded request), or a 502 when the
// upstream failed by itself.
func (p *Proxy) answer(w http.ResponseWriter, r *http.Request, a upstreamAnswer, err error) {
	if err != nil {
		writeError(w, r, http.StatusBadGateway, "faultproxy: upstream: "+err.Error())
		return
	}
	copyHeader(w.Header(), a.header)
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
	p.mu.Lock()
	p.forwarded++
	p.mu.Unlock()
}

// copyHeader copies an upstream answer's header but the hop-by-hop ones.
func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
	for _, h := range hopHeaders {
		dst.Del(h)
	}
}
