//go:build integration

package integration

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.yaml.in/yaml/v3"

	"github.com/dms2iceberg/dms2iceberg/integration/faultproxy"
	"github.com/dms2iceberg/dms2iceberg/pkg/metrictest"
	"github.com/dms2iceberg/dms2iceberg/sink"
)

// startProxy starts a fault proxy in front of upstream for the test's lifetime.
func startProxy(t *testing.T, upstream string, seed uint64, onInject func(faultproxy.Event)) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(upstream, faultproxy.Options{Seed: seed, OnInject: onInject})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestDependencyFaultsREST runs the service on Apache Iceberg's REST catalog server through the
// fault proxy: every kind of fault on table commits, lost answers on table creation, and 5xx,
// resets and unanswered requests on reads. The one service process must absorb them all in
// process (it must not exit), resolve each commit whose answer was lost by finding the batch in
// the reloaded table (counted by dms2iceberg_table_commit_unknown_outcomes_total{resolution="landed"},
// read from its /metrics), and end with every table equal to the expected
// state, read directly from the server.
func TestDependencyFaultsREST(t *testing.T) {
	uri := RequireCatalogServer(t, EnvRESTURI)
	// Live traffic, so that there are many commits: 300 records/s for about 10 s.
	p, gen := newPipelineLive(t, 2, 2000, 17, 300)
	px := startProxy(t, uri, 17, nil)
	px.SetRules(restFaultRules(0.25, 0.05, 500*time.Millisecond)...)
	ns := uniqueNamespace("it_depf")
	svcCfg := p.withCatalog(t, "restfaults", t.TempDir(), map[string]any{"type": "rest", "uri": px.URL()}, ns)
	direct := p.withCatalog(t, "restdirect", t.TempDir(), map[string]any{"type": "rest", "uri": uri}, ns)

	unknown, elapsed := p.runBehindProxy(px, gen, svcCfg, direct)
	landed := int(unknown["landed"])
	lostCommits := 0
	for _, e := range px.Events() {
		if e.Rule == "rest-commit" && (e.Kind == faultproxy.KindLost || e.Kind == faultproxy.KindLost5xx) && e.Upstream == http.StatusOK {
			lostCommits++
		}
	}
	t.Logf("MEASURED: REST catalog through the fault proxy: %d records verified in %s; faults %s (by rule: %s); commits that landed with their answer lost %d; unknown outcomes resolved in process (from /metrics) %s",
		p.records, elapsed.Round(time.Millisecond), px.Summary(), px.SummaryByRule(), lostCommits, formatOutcomes(unknown))
	if lostCommits == 0 || landed == 0 {
		t.Fatalf("no commit landed with its answer lost (%d) or none was resolved in process (%d): the unknown-outcome path did not run", lostCommits, landed)
	}
	everyKindInjected(t, px)
	direct.checkOrphans(ns, nil)
}

// runBehindProxy runs one service with configuration svc (its dependency behind px) while gen
// sends, waits until direct (the same catalog without the proxy) verifies, turns the faults off,
// reads the service's unknown commit outcomes from its /metrics, stops it gracefully, and
// verifies again. It returns the unknown outcomes by resolution and the time from the service's
// start to the first verification.
func (p *pipeline) runBehindProxy(px *faultproxy.Proxy, gen *Service, svcCfg, direct *pipeline) (map[string]float64, time.Duration) {
	t := p.t
	t.Helper()
	addr := opsFreeAddr(t)
	editConfig(t, svcCfg.config, "", map[string]any{"http_addr": addr})
	start := time.Now()
	svc := StartService(t, p.bin, svcCfg.config)
	<-gen.Done()
	p.records = countRecords(t, p.stream)
	direct.waitVerified(6*time.Minute, svc)
	elapsed := time.Since(start)
	px.Enable(false)
	// Every change is committed and verified: nothing is left to resolve.
	samples, err := metrictest.Scrape(scrapeClient, "http://"+addr+"/metrics")
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	if err := svc.Stop(90 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	direct.mustVerify()
	return unknownOutcomes(samples), elapsed
}

// everyKindInjected fails the test unless px injected every kind of fault.
func everyKindInjected(t *testing.T, px *faultproxy.Proxy) {
	t.Helper()
	for _, k := range faultproxy.Kinds {
		if px.Counts()[k] == 0 {
			t.Errorf("no %s fault was injected", k)
		}
	}
}

// checkOrphans applies the orphan oracle (orphans.go) to the namespace's tables, through the
// pipeline's (fault-free) catalog configuration, and verifies again after the cleanup.
func (p *pipeline) checkOrphans(ns string, s3c *s3.Client) orphanReport {
	t := p.t
	t.Helper()
	cfg := loadCatalogConfig(t, p.config)
	cat, err := sink.OpenCatalog(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := cat.(io.Closer); ok {
		defer c.Close()
	}
	r, err := checkOrphans(t.Context(), cat, ns, s3c)
	if err != nil {
		t.Fatalf("orphan oracle: %v", err)
	}
	t.Logf("MEASURED: orphans: %d unreferenced data files before cleanup, %d removed by it, %d referenced files, %d unreferenced after", r.before, r.removed, r.referenced, len(r.after))
	for _, f := range r.after {
		t.Errorf("orphan after cleanup: %s", f)
	}
	p.mustVerify() // the cleanup removed no referenced file
	return r
}

// loadCatalogConfig reads the sink.catalog section of a service configuration file.
func loadCatalogConfig(t *testing.T, path string) sink.CatalogConfig {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		DataDir string `yaml:"data_dir"`
		Sink    struct {
			Catalog *sink.CatalogConfig `yaml:"catalog"`
		} `yaml:"sink"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Sink.Catalog == nil {
		return sink.DefaultCatalogConfig(cfg.DataDir)
	}
	c := *cfg.Sink.Catalog
	if c.Name == "" {
		c.Name = "dms2iceberg"
	}
	return c
}

// TestDependencyFaultsS3 runs the service with its warehouse on the S3 emulator (versitygw)
// through the fault proxy (the embedded SQL catalog, so that every table file, metadata
// included, goes through it): every kind of fault on object writes, and 5xx, resets and
// unanswered requests on reads. The service must absorb them in process and end with every
// table equal to the expected state; then the orphan oracle: after cleanup no unreferenced data
// file is left, and the tables still verify.
func TestDependencyFaultsS3(t *testing.T) {
	p, gen := newPipelineLive(t, 2, 2000, 23, 300)
	s3url := os.Getenv("AWS_ENDPOINT_URL_S3")
	px := startProxy(t, s3url, 23, nil)
	px.SetRules(s3FaultRules(0.1, 0.03, time.Second)...)
	bucket := createBucket(t)
	cfg := AWSConfig(t)
	creds, err := cfg.Credentials.Retrieve(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	catalogFor := func(dataDir, endpoint string) map[string]any {
		return map[string]any{"type": "sql", "uri": "file:" + filepath.Join(dataDir, "catalog.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)",
			"warehouse": "s3://" + bucket + "/wh",
			"properties": map[string]string{"s3.endpoint": endpoint, "s3.region": cfg.Region,
				"s3.access-key-id": creds.AccessKeyID, "s3.secret-access-key": creds.SecretAccessKey}}
	}
	dir := t.TempDir()
	ns := uniqueNamespace("it_s3f")
	svcCfg := p.withCatalog(t, "s3faults", dir, catalogFor(dir, px.URL()), ns)
	direct := p.withCatalog(t, "s3direct", t.TempDir(), catalogFor(dir, s3url), ns)

	unknown, elapsed := p.runBehindProxy(px, gen, svcCfg, direct)
	t.Logf("MEASURED: S3 through the fault proxy: %d records verified in %s; faults %s (by rule: %s); forwarded %d; unknown commit outcomes resolved in process (from /metrics) %s",
		p.records, elapsed.Round(time.Millisecond), px.Summary(), px.SummaryByRule(), px.Forwarded(), formatOutcomes(unknown))
	everyKindInjected(t, px)
	direct.checkOrphans(ns, S3(t))
}
