//go:build integration

package integration

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// catalogCase is one catalog the pipeline test runs against.
type catalogCase struct {
	name string
	// setup returns the sink.catalog section (nil: the embedded default) and the target
	// namespace ("": the source schema) for a service whose data directory is dataDir, and the
	// Iceberg catalog properties with which Spark reads the same tables (nil: no Spark read
	// here; TestSparkReadsTables covers the embedded catalog).
	setup func(t *testing.T, dataDir string) (catalog map[string]any, namespace string, spark map[string]string)
}

func catalogCases() []catalogCase {
	return []catalogCase{
		{name: "sqlite", setup: func(*testing.T, string) (map[string]any, string, map[string]string) {
			return nil, "", nil
		}},
		{name: "postgres", setup: func(t *testing.T, dataDir string) (map[string]any, string, map[string]string) {
			uri := RequireCatalogServer(t, EnvPostgresURI)
			u, err := url.Parse(uri)
			if err != nil {
				t.Fatal(err)
			}
			wh := "file://" + filepath.Join(dataDir, "warehouse")
			// Spark: Iceberg's JdbcCatalog on the same database (the same tables and columns as
			// iceberg-go's SQL catalog).
			jdbc := url.URL{Scheme: "postgresql", Host: u.Host, Path: u.Path, RawQuery: u.RawQuery}
			return map[string]any{"type": "sql", "uri": uri, "warehouse": wh}, uniqueNamespace("it_pg"),
				map[string]string{"type": "jdbc", "uri": "jdbc:" + jdbc.String(), "jdbc.user": u.User.Username(),
					"warehouse": wh, "jdbc.schema-version": "V1"}
		}},
		{name: "glue", setup: func(t *testing.T, dataDir string) (map[string]any, string, map[string]string) {
			endpoint := RequireCatalogServer(t, EnvGlueEndpoint)
			wh := "s3://" + createBucket(t) + "/warehouse"
			cfg := AWSConfig(t)
			creds, err := cfg.Credentials.Retrieve(t.Context())
			if err != nil {
				t.Fatalf("AWS credentials: %v", err)
			}
			s3 := os.Getenv("AWS_ENDPOINT_URL_S3")
			return map[string]any{
					"type":      "glue",
					"warehouse": wh,
					"properties": map[string]string{
						"glue.endpoint":          endpoint,
						"glue.region":            cfg.Region,
						"glue.access-key-id":     creds.AccessKeyID,
						"glue.secret-access-key": creds.SecretAccessKey,
						// The table files go to the S3 emulator, not to the Glue endpoint.
						"s3.endpoint":          s3,
						"s3.region":            cfg.Region,
						"s3.access-key-id":     creds.AccessKeyID,
						"s3.secret-access-key": creds.SecretAccessKey,
					},
				}, uniqueNamespace("it_glue"),
				map[string]string{"type": "glue", "warehouse": wh, "glue.endpoint": endpoint, "client.region": cfg.Region,
					"s3.endpoint": s3, "s3.path-style-access": "true",
					"s3.access-key-id": creds.AccessKeyID, "s3.secret-access-key": creds.SecretAccessKey}
		}},
		{name: "rest", setup: func(t *testing.T, dataDir string) (map[string]any, string, map[string]string) {
			// The server's warehouse is a local directory (file://) that this process writes to
			// as well; the server decides every table's location.
			uri := RequireCatalogServer(t, EnvRESTURI)
			return map[string]any{"type": "rest", "uri": uri}, uniqueNamespace("it_rest"),
				map[string]string{"type": "rest", "uri": uri}
		}},
	}
}

// withCatalog returns a copy of p whose service configuration has its own KCL application
// (and lease table), data directory, catalog and target namespace, so that several services
// can each consume p's whole stream into a different catalog.
func (p *pipeline) withCatalog(t *testing.T, name, dataDir string, catalog map[string]any, namespace string) *pipeline {
	t.Helper()
	q := *p
	q.t = t
	q.app = UniqueName("dms2iceberg-" + name)
	q.dataDir = dataDir
	t.Cleanup(func() { DeleteTable(t, q.app) })
	b, err := os.ReadFile(p.config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("config: %v", err)
	}
	cfg["application"] = q.app
	cfg["data_dir"] = q.dataDir
	cfg["http_addr"] = ""
	snk, _ := cfg["sink"].(map[string]any)
	if snk == nil {
		snk = map[string]any{}
	}
	if catalog != nil {
		snk["catalog"] = catalog
	}
	if namespace != "" {
		snk["namespace"] = namespace
	}
	cfg["sink"] = snk
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	q.config = filepath.Join(q.dataDir, "config.yaml")
	if err := os.WriteFile(q.config, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return &q
}

// TestCatalogs runs the same end-to-end pipeline against every catalog the service supports,
// each on a real server: the SQL catalog on SQLite (embedded) and on PostgreSQL, the Glue
// catalog on moto's Glue API with the warehouse on the S3 emulator, and Apache Iceberg's REST
// catalog server. One generated workload (2 shards, 3,000 changes after the full load) is written
// once; for each catalog a service with its own KCL application consumes the whole stream, and
// verify must find every table equal to the expected state, also after a graceful stop. Then
// Spark reads the tables through the same server catalog (Iceberg's JdbcCatalog, GlueCatalog,
// RESTCatalog) and must find the same rows. A missing server fails its subtest (never a skip).
func TestCatalogs(t *testing.T) {
	p := newPipeline(t, 2, 3000, 6)
	for _, c := range catalogCases() {
		t.Run(c.name, func(t *testing.T) {
			dataDir := t.TempDir()
			catalog, ns, spark := c.setup(t, dataDir)
			q := p.withCatalog(t, c.name, dataDir, catalog, ns)
			start := time.Now()
			svc := StartService(t, q.bin, q.config)
			q.waitVerified(5*time.Minute, svc)
			elapsed := time.Since(start)
			if err := svc.Stop(90 * time.Second); err != nil {
				t.Fatalf("graceful stop: %v", err)
			}
			// After the stop, from a fresh process: the catalog holds everything. The report names
			// the tables it read, which must be in this case's namespace.
			out := q.mustVerify()
			if ns != "" && !strings.Contains(out, "table "+ns+".") {
				t.Fatalf("verify did not read the tables from namespace %s:\n%s", ns, out)
			}
			lat := commitLatencies(t, svc.LogPath)
			t.Logf("MEASURED: catalog %s: %d records verified in %s; %d commits, commit latency p50 %s p99 %s",
				c.name, q.records, elapsed.Round(time.Millisecond), len(lat), pct(lat, 0.5), pct(lat, 0.99))
			if spark != nil {
				q.sparkCheck("dms2iceberg", spark, ns) // the SQL catalog's catalog_name
			}
		})
	}
}

// mustVerify runs verify and returns its report; it fails the test if verify fails.
func (p *pipeline) mustVerify() string {
	p.t.Helper()
	ok, out := p.verify()
	if !ok {
		p.t.Fatalf("verify:\n%s", out)
	}
	return out
}
