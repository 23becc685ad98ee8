package maintenance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// RunOptions tune an on-demand maintenance run (RunTable).
type RunOptions struct {
	// Log receives the run's log lines. Default: none.
	Log *zap.Logger
	// Metrics receives the run's report and failures. Default: none.
	Metrics Metrics
	// IgnoreLease runs even while another worker holds the table's lease, and leaves the lease
	// alone. Safe for the data (a maintenance commit that loses a race is restaged or fails), but
	// it may duplicate work.
	IgnoreLease bool
	// SkipOrphans leaves orphan files alone.
	SkipOrphans bool
	// OrphansOfAnyAge removes orphan files however young (cfg.OrphanMinAge is ignored): only for
	// tests and the chaos oracle, once no writer runs, since a file being written is an orphan
	// until its commit.
	OrphansOfAnyAge bool
	// BeforeCommit, for tests, is called before each maintenance commit with the step
	// ("sweep", "position", "compact", "expire", "manifests", ...) and the attempt (0 first), after staging:
	// a commit that lands meanwhile makes the attempt lose and be restaged.
	BeforeCommit func(step string, attempt int)
}

// ErrLeaseHeld is returned by RunTable when another worker holds the table's lease.
var ErrLeaseHeld = errors.New("maintenance lease held by another worker")

// RunTable runs every maintenance step on one table now, regardless of thresholds, on the
// calling goroutine: it compacts whatever has deletes or is small, expires snapshots outside the
// retention window, rewrites manifests and removes orphan files older than cfg.OrphanMinAge. It
// takes the table's lease for the run (unless opts.IgnoreLease) and releases it afterwards.
func RunTable(ctx context.Context, cat catalog.Catalog, ident table.Identifier, cfg Config, opts RunOptions) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	log := opts.Log
	if log == nil {
		log = zap.NewNop()
	}
	name := ident[0] + "." + ident[len(ident)-1]
	m := New(cat, ident, name, cfg, log.With(zap.String("table", name)), opts.Metrics, 0)
	m.lease.ignore = opts.IgnoreLease
	m.commits.onDemand = true
	m.commits.beforeCommit = opts.BeforeCommit
	if opts.OrphansOfAnyAge {
		m.cfg.OrphanMinAge = 0
	}
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		return Report{Table: name}, fmt.Errorf("load %s: %w", name, err)
	}
	if err := tableprop.CheckStateVersion(name, tbl.Properties()); err != nil {
		return Report{Table: name}, err
	}
	if !m.lease.take(ctx, tbl) {
		owner, until := ReadLease(tbl.Properties())
		return Report{Table: name}, fmt.Errorf("%s: %w (%s until %s)", name, ErrLeaseHeld, owner, until.Format(time.RFC3339))
	}
	defer m.lease.release()
	m.deferred.list(ctx, tbl, time.Now())
	s := steps{compact: true, expire: true, manifests: true, orphans: !opts.SkipOrphans, trigger: "manual",
		purge: m.deferred.due(time.Now())}
	return m.maintain(ctx, s)
}
