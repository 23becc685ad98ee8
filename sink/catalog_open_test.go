package sink

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestOpenCatalogRetriesUnavailableServer: a REST catalog server that refuses the first
// configuration request (a 503 from a load balancer while the server restarts) does not stop
// the service at start: OpenCatalog asks again. Found by the dependency-fault chaos, where one
// refused GET /v1/config made a worker exit at start.
func TestOpenCatalogRetriesUnavailableServer(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/config" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"unavailable","type":"ServiceUnavailableException","code":503}}`)
			return
		}
		_, _ = io.WriteString(w, `{"defaults":{},"overrides":{}}`)
	}))
	defer srv.Close()
	cat, err := OpenCatalog(context.Background(), CatalogConfig{Type: "rest", Name: "dms2iceberg", URI: srv.URL})
	if err != nil {
		t.Fatalf("open after two refusals: %v", err)
	}
	if c, ok := cat.(io.Closer); ok {
		_ = c.Close()
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d config requests, want 3", n)
	}
}
