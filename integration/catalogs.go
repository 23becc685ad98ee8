//go:build integration

package integration

// The catalog servers of the integration tests (.ci/catalogs.sh): their variables and checks.

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"
)

// Environment variables naming the catalog servers, as `.ci/catalogs.sh env` prints them.
const (
	EnvGlueEndpoint = "DMS2ICEBERG_IT_GLUE_ENDPOINT" // moto's server mode (AWS Glue API)
	EnvRESTURI      = "DMS2ICEBERG_IT_REST_URI"      // Apache Iceberg's REST catalog server
	EnvPostgresURI  = "DMS2ICEBERG_IT_POSTGRES_URI"  // PostgreSQL for the SQL catalog
)

const catalogsHint = `the catalog tests need the catalog servers (moto for Glue, Iceberg's REST catalog server,
PostgreSQL). From the repository root:
    .ci/catalogs.sh up && eval "$(.ci/catalogs.sh env)"
then run the tests again, or run everything with: make test`

// RequireCatalogServer fails the test (it never skips) unless the variable env is set and the
// server it names answers: HTTP for an http:// URL, a TCP connection for a postgres:// URL.
// It returns the variable's value.
func RequireCatalogServer(t testing.TB, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		t.Fatalf("%s is not set: %s", env, catalogsHint)
	}
	u, err := url.Parse(v)
	if err != nil {
		t.Fatalf("%s=%s: %v", env, v, err)
	}
	switch u.Scheme {
	case "http", "https":
		resp, err := (&http.Client{Timeout: 3 * time.Second}).Get(v)
		if err != nil {
			t.Fatalf("%s=%s does not answer (%v): %s", env, v, err, catalogsHint)
		}
		_ = resp.Body.Close()
	default:
		c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
		if err != nil {
			t.Fatalf("%s=%s does not answer (%v): %s", env, v, err, catalogsHint)
		}
		_ = c.Close()
	}
	return v
}

// uniqueNamespace returns a namespace name that no other test run uses: the shared catalog
// servers (REST, Glue, PostgreSQL) outlive a test. Lower case, digits and '_' only (Glue's rule).
func uniqueNamespace(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}
