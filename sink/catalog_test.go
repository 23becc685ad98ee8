package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// racingCatalog fails CreateNamespace the way a server that loses a creation race without
// mapping it to "already exists" does, after the namespace was created by someone else.
type racingCatalog struct {
	catalog.Catalog
	exists bool
	err    error
}

func (c *racingCatalog) CreateNamespace(context.Context, table.Identifier, iceberg.Properties) error {
	return c.err
}

func (c *racingCatalog) CheckNamespaceExists(context.Context, table.Identifier) (bool, error) {
	return c.exists, nil
}

func TestNamespaceRaceTolerant(t *testing.T) {
	t.Parallel()
	boom := errors.New("500: UncheckedSQLException: primary key violation")
	ctx := context.Background()
	ns := table.Identifier{"shop"}
	for _, tc := range []struct {
		name      string
		exists    bool
		err       error
		wantExist bool
		wantBoom  bool
	}{
		{name: "created", err: nil},
		{name: "already exists", exists: true, err: catalog.ErrNamespaceAlreadyExists, wantExist: true},
		{name: "lost the race", exists: true, err: boom, wantExist: true},
		{name: "real failure", exists: false, err: boom, wantBoom: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cat := NamespaceRaceTolerant(&racingCatalog{exists: tc.exists, err: tc.err})
			err := cat.CreateNamespace(ctx, ns, nil)
			if got := errors.Is(err, catalog.ErrNamespaceAlreadyExists); got != tc.wantExist {
				t.Errorf("CreateNamespace = %v: already exists %v, want %v", err, got, tc.wantExist)
			}
			if got := errors.Is(err, boom); got != tc.wantBoom {
				t.Errorf("CreateNamespace = %v: the server's error %v, want %v", err, got, tc.wantBoom)
			}
			if tc.err == nil && err != nil {
				t.Errorf("CreateNamespace = %v, want nil", err)
			}
		})
	}
}

func TestOpenCatalogPostgresDriver(t *testing.T) {
	t.Parallel()
	// A postgres:// URI selects the pgx driver: opening fails on the connection (nothing listens
	// on port 1), not on an unknown driver or a SQLite file name.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := DefaultCatalogConfig(t.TempDir())
	c.URI = "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"
	cat, err := OpenCatalog(ctx, c)
	if err == nil {
		if cl, ok := cat.(io.Closer); ok {
			_ = cl.Close()
		}
		t.Fatal("OpenCatalog on a closed port succeeded")
	}
	if errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	for _, bad := range []string{"unknown driver", "sqlite"} {
		if strings.Contains(strings.ToLower(err.Error()), bad) {
			t.Fatalf("OpenCatalog error %q mentions %q: the pgx driver was not selected", err, bad)
		}
	}
}

func TestOpenCatalogSQLiteIsCloser(t *testing.T) {
	t.Parallel()
	cat, err := OpenCatalog(context.Background(), DefaultCatalogConfig(filepath.Join(t.TempDir(), "d")))
	if err != nil {
		t.Fatal(err)
	}
	cl, ok := cat.(io.Closer)
	if !ok {
		t.Fatal("the catalog is not an io.Closer")
	}
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSQLiteConcurrentCreateTable: table writers create their tables concurrently on the
// embedded catalog. iceberg-go's SQL catalog reads and then writes in one transaction; on SQLite
// a deferred transaction that must upgrade to a write lock fails at once with SQLITE_BUSY when
// another connection writes, whatever the busy timeout. The default URI starts transactions
// with BEGIN IMMEDIATE, so they wait instead.
func TestSQLiteConcurrentCreateTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cat, err := OpenCatalog(ctx, DefaultCatalogConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cat.(io.Closer).Close() }()
	if err := cat.CreateNamespace(ctx, table.Identifier{"shop"}, nil); err != nil {
		t.Fatal(err)
	}
	schema := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	const n = 12
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := cat.CreateTable(ctx, table.Identifier{"shop", fmt.Sprintf("t%d", i)}, schema)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
