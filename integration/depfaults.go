//go:build integration

package integration

// The fault-proxy rules of the dependency-fault tests (depfaults_test.go) and of the chaos run's
// dependency faults (DMS2ICEBERG_CHAOS_DEPS): the REST catalog, S3, the KCL lease table in
// DynamoDB and the workers' Kinesis calls.

import (
	"net/http"
	"regexp"
	"time"

	"github.com/dms2iceberg/dms2iceberg/integration/faultproxy"
)

// Requests of the Iceberg REST protocol that the proxy rules select.
var (
	// restCommit is a table commit (POST /v1/{prefix}/namespaces/{ns}/tables/{table}).
	restCommit = regexp.MustCompile(`/namespaces/[^/]+/tables/[^/]+$`)
	// restCreate is a table creation (POST .../namespaces/{ns}/tables).
	restCreate = regexp.MustCompile(`/namespaces/[^/]+/tables$`)
)

// depFaultRules are the faults of the dependency tests and of the chaos run's dependency
// faults: on the REST catalog, every kind on table commits (a lost answer is a commit that
// landed at the server while the client cannot know: the unknown-outcome path), lost answers on
// table creation, and refusals, resets and unanswered requests on reads; on S3, every kind on
// object writes and reads.
func restFaultRules(commitProb, readProb float64, hold time.Duration) []faultproxy.Rule {
	return []faultproxy.Rule{
		{Name: "rest-commit", Method: http.MethodPost, Path: restCommit, Kinds: faultproxy.Kinds, Prob: commitProb, Hold: hold},
		{Name: "rest-create", Method: http.MethodPost, Path: restCreate, Kinds: []faultproxy.Kind{faultproxy.KindLost, faultproxy.KindLost5xx, faultproxy.KindStatus}, Prob: commitProb, Hold: hold},
		{Name: "rest-read", Method: http.MethodGet, Kinds: []faultproxy.Kind{faultproxy.KindStatus, faultproxy.KindReset, faultproxy.KindTimeout}, Prob: readProb, Hold: hold},
	}
}

func s3FaultRules(writeProb, readProb float64, hold time.Duration) []faultproxy.Rule {
	return []faultproxy.Rule{
		{Name: "s3-write", Method: http.MethodPut, Kinds: faultproxy.Kinds, Prob: writeProb, Hold: hold},
		{Name: "s3-read", Method: http.MethodGet, Kinds: []faultproxy.Kind{faultproxy.KindStatus, faultproxy.KindReset, faultproxy.KindTimeout}, Prob: readProb, Hold: hold},
		{Name: "s3-head", Method: http.MethodHead, Kinds: []faultproxy.Kind{faultproxy.KindStatus, faultproxy.KindReset}, Prob: readProb, Hold: hold},
	}
}

// dynamoFaultRules are the chaos run's faults on the KCL lease table: its writes (take, renew,
// checkpoint, evict) throttled, refused for throughput, answered 5xx, reset, held unanswered, or
// applied with the answer lost (the retry then fails its condition: the lease code's
// unknown-outcome path); its reads refused, answered 5xx or reset. The SDK retries throttling,
// 5xx and resets by itself (3 attempts), so most faults are recovered below the KCL.
func dynamoFaultRules(writeProb, readProb float64, hold time.Duration) []faultproxy.Rule {
	return firstOfEachKind(0.2, []faultproxy.Rule{
		{Name: "lease-write", Target: faultproxy.DynamoDBTarget("UpdateItem", "PutItem", "DeleteItem"),
			Kinds: []faultproxy.Kind{faultproxy.KindThroughput, faultproxy.KindThrottling, faultproxy.KindStatus,
				faultproxy.KindLost, faultproxy.KindLost5xx, faultproxy.KindTimeout, faultproxy.KindReset},
			Prob: writeProb, Hold: hold},
		{Name: "lease-read", Target: faultproxy.DynamoDBTarget("GetItem", "Scan", "Query"),
			Kinds: []faultproxy.Kind{faultproxy.KindThroughput, faultproxy.KindThrottling, faultproxy.KindStatus, faultproxy.KindReset},
			Prob:  readProb},
	})
}

// kinesisFaultRules are the chaos run's faults on the workers' Kinesis calls: GetRecords
// refused for throughput, with an expired iterator (the shard's consumer ends; the next one
// starts from the checkpoint with a new iterator), 5xx, resets and unanswered; and, with
// heartbeats on, the heartbeat PutRecords partly failed, refused, answered 5xx or stored with
// the answer lost (duplicate heartbeats downstream).
//
// The heartbeat puts' coverage rules inject with probability 1 (the first four heartbeat puts
// get one kind each): under steady traffic few shards are quiet, so a short run puts few
// heartbeats (seed 20261222: about 20 through the proxy, and a lost answer never injected).
func kinesisFaultRules(getProb, putProb float64, hold time.Duration, heartbeats bool) []faultproxy.Rule {
	rules := firstOfEachKind(0.2, []faultproxy.Rule{
		{Name: "get-records", Target: faultproxy.KinesisTarget("GetRecords"),
			Kinds: []faultproxy.Kind{faultproxy.KindThroughput, faultproxy.KindExpiredIterator, faultproxy.KindStatus,
				faultproxy.KindReset, faultproxy.KindTimeout}, Prob: getProb, Hold: hold},
	})
	if heartbeats {
		rules = append(rules, firstOfEachKind(1, []faultproxy.Rule{{Name: "put-records", Target: faultproxy.KinesisTarget("PutRecords"),
			Kinds: []faultproxy.Kind{faultproxy.KindPartialPut, faultproxy.KindThroughput, faultproxy.KindStatus, faultproxy.KindLost},
			Prob:  putProb, FailEntries: 0.3}})...)
	}
	return rules
}

// genFaultRules are the chaos run's faults on the generator's PutRecords (with Kinesis
// faulted): partial failures (about 30% of the entries refused, the rest stored) and whole
// requests refused for throughput, both answers that say which records were not written, so the
// generator sends exactly those again.
func genFaultRules(prob float64) []faultproxy.Rule {
	return firstOfEachKind(0.2, []faultproxy.Rule{{Name: "gen-put-records", Target: faultproxy.KinesisTarget("PutRecords"),
		Kinds: []faultproxy.Kind{faultproxy.KindPartialPut, faultproxy.KindThroughput}, Prob: prob, FailEntries: 0.3}})
}

// firstOfEachKind puts in front of every rule one rule per kind of it, each injecting that
// kind once (Max 1) with probability prob, the next in line once the one before has: the proxy
// consults the first rule that selects a request and has budget left, so every kind is injected
// early in a run however few requests it makes (a short run under load reads little), and the
// rule itself with its own probability afterwards. They are named after the rule, "-first".
func firstOfEachKind(prob float64, rules []faultproxy.Rule) []faultproxy.Rule {
	var out []faultproxy.Rule
	for _, r := range rules {
		for _, k := range r.Kinds {
			first := r
			first.Name, first.Kinds, first.Prob, first.Max = r.Name+"-first", []faultproxy.Kind{k}, prob, 1
			out = append(out, first)
		}
	}
	return append(out, rules...)
}
