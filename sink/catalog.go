package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	// Catalog and FileIO implementations register themselves on import.
	_ "github.com/apache/iceberg-go/catalog/glue"
	"github.com/apache/iceberg-go/catalog/rest"
	_ "github.com/apache/iceberg-go/catalog/sql"
	_ "github.com/apache/iceberg-go/io/gocloud/s3"

	// PostgreSQL driver (registers "pgx") for the SQL catalog on PostgreSQL.
	_ "github.com/jackc/pgx/v5/stdlib"
	// Pure-Go SQLite driver (registers "sqlite") for the embedded SQL catalog.
	"modernc.org/sqlite"

	"github.com/dms2iceberg/dms2iceberg/sink/commit"
)

// CatalogConfig selects and configures the Iceberg catalog and warehouse.
type CatalogConfig struct {
	// Type is "sql" (default), "glue" or "rest".
	Type string `yaml:"type"`
	// Name is the catalog name recorded in the SQL catalog's rows. Default "dms2iceberg".
	Name string `yaml:"name"`
	// URI is the catalog location: for "sql" a SQLite database URI (default
	// "file:<DataDir>/catalog.db?...") or a PostgreSQL URL (postgres://user@host:port/db?...,
	// which selects the pgx driver and the postgres dialect), for "rest" the server URL, unused
	// for "glue".
	URI string `yaml:"uri"`
	// Warehouse is where table files go: "file:///abs/path" (default "<DataDir>/warehouse") or
	// "s3://bucket/prefix".
	Warehouse string `yaml:"warehouse"`
	// Properties are passed to iceberg-go as they are (s3.endpoint, s3.region, glue.endpoint,
	// credential, ...). Empty by default.
	Properties map[string]string `yaml:"properties"`
}

// DefaultCatalogConfig returns the embedded default: SQLite catalog and a local warehouse under
// dataDir.
func DefaultCatalogConfig(dataDir string) CatalogConfig {
	return CatalogConfig{
		Type:      "sql",
		Name:      "dms2iceberg",
		URI:       sqliteURI(filepath.Join(dataDir, "catalog.db")),
		Warehouse: "file://" + filepath.Join(dataDir, "warehouse"),
	}
}

// sqliteURI is the DSN of the embedded catalog: WAL, a 10 s busy timeout, and BEGIN IMMEDIATE
// transactions. iceberg-go's SQL catalog reads, then writes in one transaction; a deferred
// transaction that must upgrade to a write lock while another connection writes fails at once
// with SQLITE_BUSY (the busy timeout does not apply), which stopped the service when table
// writers created their tables concurrently. An immediate transaction takes the write lock
// first and waits for it.
//
// OpenCatalog adds _txlock=immediate to any SQLite URI that does not choose a _txlock itself.
func sqliteURI(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
}

// Validate reports the first invalid field.
func (c CatalogConfig) Validate() error {
	switch c.Type {
	case "sql", "glue", "rest":
	default:
		return fmt.Errorf("catalog.type: %q is not one of sql, glue, rest", c.Type)
	}
	if c.Name == "" {
		return fmt.Errorf("catalog.name: must not be empty")
	}
	if c.Type != "glue" && c.URI == "" {
		return fmt.Errorf("catalog.uri: required for a %s catalog", c.Type)
	}
	if c.Type != "rest" && c.Warehouse == "" {
		return fmt.Errorf("catalog.warehouse: required for a %s catalog", c.Type)
	}
	if c.Warehouse != "" && !strings.HasPrefix(c.Warehouse, "file://") && !strings.HasPrefix(c.Warehouse, "s3://") &&
		!strings.HasPrefix(c.Warehouse, "s3a://") && !strings.HasPrefix(c.Warehouse, "/") {
		return fmt.Errorf("catalog.warehouse: %q must be a file:// or s3:// location", c.Warehouse)
	}
	return nil
}

// OpenCatalog opens the configured catalog. For a local warehouse it creates the directory, and
// for the SQL catalog on SQLite it creates the database's directory. The catalog it returns
// tolerates concurrent creation of a namespace (see NamespaceRaceTolerant) and is an io.Closer.
func OpenCatalog(ctx context.Context, c CatalogConfig) (catalog.Catalog, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	props := iceberg.Properties{}
	for k, v := range c.Properties {
		props[k] = v
	}
	props["type"] = c.Type
	if c.Warehouse != "" {
		wh := c.Warehouse
		if strings.HasPrefix(wh, "/") {
			wh = "file://" + wh
		}
		if p, ok := strings.CutPrefix(wh, "file://"); ok {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return nil, fmt.Errorf("create warehouse %s: %w", p, err)
			}
		}
		props["warehouse"] = wh
	}
	if c.URI != "" {
		props["uri"] = c.URI
	}
	if c.Type == "sql" {
		if _, ok := props["sql.driver"]; !ok {
			if isPostgresURI(c.URI) {
				props["sql.driver"], props["sql.dialect"] = "pgx", "postgres"
			} else {
				props["sql.driver"], props["sql.dialect"] = "sqlite", "sqlite"
				if !strings.Contains(c.URI, "_txlock=") { // see sqliteURI
					sep := "?"
					if strings.Contains(c.URI, "?") {
						sep = "&"
					}
					props["uri"] = c.URI + sep + "_txlock=immediate"
				}
				if p, ok := strings.CutPrefix(c.URI, "file:"); ok {
					p, _, _ = strings.Cut(p, "?")
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						return nil, fmt.Errorf("create catalog directory: %w", err)
					}
				}
			}
		}
	}
	var cat catalog.Catalog
	var err error
	for attempt := 0; ; attempt++ {
		cat, err = catalog.Load(ctx, c.Name, props)
		// Opening creates the catalog's tables; two processes opening a new SQLite file at the
		// same moment (the service and `verify`, say) can get SQLITE_BUSY without the busy
		// timeout applying. Opening again is safe.
		if err == nil || ctx.Err() != nil {
			break
		}
		if sqliteBusy(err) && attempt < 20 {
			if err := commit.Sleep(ctx, time.Duration(100+attempt*100)*time.Millisecond); err != nil {
				return nil, err
			}
			continue
		}
		// A REST catalog reads its configuration from the server (GET /v1/config): a refused,
		// reset or unanswered request is a server blip, not a wrong configuration, so it is asked
		// again a few times (about 6 s in all) before the service gives up.
		if c.Type == "rest" && attempt < 5 && !errors.Is(err, rest.ErrUnauthorized) &&
			!errors.Is(err, rest.ErrForbidden) && !errors.Is(err, rest.ErrBadRequest) {
			if err := commit.Sleep(ctx, time.Duration(200<<attempt)*time.Millisecond); err != nil {
				return nil, err
			}
			continue
		}
		break
	}
	if err != nil {
		return nil, fmt.Errorf("open %s catalog %s: %w", c.Type, c.Name, err)
	}
	return NamespaceRaceTolerant(cat), nil
}

// sqliteBusy reports an SQLITE_BUSY (5) or SQLITE_LOCKED (6) error, extended codes included.
func sqliteBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code() & 0xff
	return code == 5 || code == 6
}

// NamespaceRaceTolerant wraps cat so that CreateNamespace reports
// catalog.ErrNamespaceAlreadyExists whenever the namespace exists after a failed create. Table
// writers create their namespace concurrently, and not every server maps the losing create to
// "already exists": Apache Iceberg's REST catalog server on a JDBC backend answers HTTP 500
// (a primary-key violation) instead of 409. Every other method is the wrapped catalog's.
func NamespaceRaceTolerant(cat catalog.Catalog) catalog.Catalog {
	if _, ok := cat.(*raceTolerantCatalog); ok {
		return cat
	}
	return &raceTolerantCatalog{Catalog: cat}
}

type raceTolerantCatalog struct {
	catalog.Catalog
}

func (c *raceTolerantCatalog) CreateNamespace(ctx context.Context, ns table.Identifier, props iceberg.Properties) error {
	err := c.Catalog.CreateNamespace(ctx, ns, props)
	if err == nil || errors.Is(err, catalog.ErrNamespaceAlreadyExists) || ctx.Err() != nil {
		return err
	}
	if ok, cerr := c.Catalog.CheckNamespaceExists(ctx, ns); cerr == nil && ok {
		return fmt.Errorf("%w (another create won: %v)", catalog.ErrNamespaceAlreadyExists, err)
	}
	return err
}

// Close closes the wrapped catalog if it is an io.Closer (the SQL catalog's database).
func (c *raceTolerantCatalog) Close() error {
	if cl, ok := c.Catalog.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// Unwrap returns the catalog iceberg-go opened, for callers that need its concrete type.
func (c *raceTolerantCatalog) Unwrap() catalog.Catalog { return c.Catalog }

// isPostgresURI reports whether uri is a PostgreSQL connection URL (pgx's URL form).
func isPostgresURI(uri string) bool {
	return strings.HasPrefix(uri, "postgres://") || strings.HasPrefix(uri, "postgresql://")
}
