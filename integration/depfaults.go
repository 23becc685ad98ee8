//go:build integration

package integration

// The fault-proxy rules of the dependency-fault tests (depfaults_test.go) and of the chaos run's
// dependency faults (DMS2ICEBERG_CHAOS_DEPS).

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
