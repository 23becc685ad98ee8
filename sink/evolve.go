package sink

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/commit"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The table's shape: opening and creating the table, and schema changes from data (schema
// changes from table-defs are control records: control.go). Every change commits through
// commit.Run (the committer's policy) and is adopted with targetTable.use (state.go).

// schemaApplier opens a table writer's table and shapes it: loading it, creating it (and its
// namespace) on first sight, retrying failed catalog calls, claiming its owner (owner.go),
// giving a keyless table its key (key.go), noting a keyless table without the record identity
// (identity.go) and adding the columns seen in data. Control records that change the schema
// are the control applier's (reconcile).
type schemaApplier struct {
	*tableScope
	st *targetTable
	pl *planner   // which columns of an event the table lacks (unknownColumns)
	cm *committer // commits the rows before a schema change, and its policy
	// truncWM holds, per shard, the latest truncate that came before the table existed: the
	// table is created with it as its watermark (truncate.go).
	truncWM map[string]string
	// identityNoted: noteNoIdentity logged (identity.go).
	identityNoted bool
	// afterReload is a key refused during a reload, tried again after its replace (key.go).
	afterReload *keyAfterReload
}

// open loads the target table, creating it (and its namespace) on first sight. A table that
// cannot be created as configured (a key column it would not have, a floating-point key, an
// invalid partition spec) pauses the writer instead of failing the service: its records are
// dead-lettered with the reason until a table-def or a restart with fixed configuration lets it
// be created.
//
// A failed catalog call (the load, the namespace or the table creation: a refused request, a
// reset connection, a create that the server carried out while its answer was lost) is tried
// again in process, like a failed commit, after the same waits and as often (commit_retries;
// while closing, until shutdown_timeout): a catalog blip must not stop the service. A create
// whose answer was lost finds its table on the next load.
func (sa *schemaApplier) open(ctx context.Context, ev *change.Event) error {
	return sa.retryCatalog(ctx, func() error { return sa.openOnce(ctx, ev) })
}

// retryCatalog runs call until it returns no ErrCatalogCall, at most commit_retries times
// more (until the context ends while closing), after the waits of a failed commit.
func (sa *schemaApplier) retryCatalog(ctx context.Context, call func() error) error {
	for attempt := 0; ; attempt++ {
		err := call()
		if err == nil || !errors.Is(err, ErrCatalogCall) || ctx.Err() != nil {
			return err
		}
		if attempt >= sa.env.retries && !sa.cm.closing {
			return fmt.Errorf("%w (giving up after %d attempts)", err, attempt+1)
		}
		sa.log.Warn("open table failed; trying again", zap.Int("attempt", attempt+1), zap.Error(err))
		if err := commit.Sleep(ctx, commit.RetryDelay(attempt, false, sa.cm.closing)); err != nil {
			return err
		}
	}
}

// ErrCatalogCall marks a failed catalog call of opening a table (the load, the namespace or
// the table creation): transient, a caller may retry it. The writer does, after the waits of a
// failed commit and as often (retryCatalog).
var ErrCatalogCall = errors.New("catalog call failed")

// ErrUncreatable marks a table that cannot be created as defined and configured (a key column
// it would not have, a floating-point key, an invalid partition spec): permanent, a caller must
// not retry it as it is. The writer pauses the table instead, until a table-def or a restart
// with fixed configuration lets it be created.
var ErrUncreatable = errors.New("table cannot be created as configured")

// marked is err that errors.Is also matches to kind (ErrCatalogCall, ErrUncreatable); its
// message is err's own.
type marked struct{ kind, err error }

func (m marked) Error() string   { return m.err.Error() }
func (m marked) Unwrap() []error { return []error{m.kind, m.err} }

// mark makes err match kind with errors.Is, keeping its message.
func mark(kind, err error) error { return marked{kind: kind, err: err} }

// catalogCall bounds one catalog call of open, load or create by sink.commit_timeout, as a commit
// attempt is bounded: neither iceberg-go's REST client nor the AWS SDK sets a request timeout,
// and a catalog that accepted the request and never answered held the writer for ever. The call
// past it fails like any other (an ErrCatalogCall, tried again).
func (sa *schemaApplier) catalogCall(ctx context.Context, call func(ctx context.Context) error) error {
	if sa.env.attemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sa.env.attemptTimeout)
		defer cancel()
	}
	return call(ctx)
}

// loadTable loads the writer's table within sink.commit_timeout (catalogCall).
func (sa *schemaApplier) loadTable(ctx context.Context) (tbl *table.Table, err error) {
	err = sa.catalogCall(ctx, func(ctx context.Context) error {
		tbl, err = sa.env.cat.LoadTable(ctx, sa.ident)
		return err
	})
	return tbl, err
}

func (sa *schemaApplier) openOnce(ctx context.Context, ev *change.Event) error {
	tbl, err := sa.loadTable(ctx)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		tbl, err = sa.create(ctx, ev)
		if errors.Is(err, ErrUncreatable) {
			sa.st.pause(err.Error())
			return nil
		}
	} else if err != nil {
		err = mark(ErrCatalogCall, err)
	}
	if err != nil {
		return fmt.Errorf("open table %s: %w", sa.name, err)
	}
	sa.st.fsF = tbl.FS // a table from the catalog, for commit.Detach
	if err := sa.st.use(tbl); err != nil {
		return err
	}
	return sa.opened(ctx)
}

// load opens the table when it exists, never creating it; found reports whether it does. A
// failed load is tried again as in open.
func (sa *schemaApplier) load(ctx context.Context) (found bool, err error) {
	err = sa.retryCatalog(ctx, func() error {
		found, err = sa.loadOnce(ctx)
		return err
	})
	return found, err
}

func (sa *schemaApplier) loadOnce(ctx context.Context) (found bool, err error) {
	tbl, err := sa.loadTable(ctx)
	switch {
	case errors.Is(err, catalog.ErrNoSuchTable):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("open table %s: %w", sa.name, mark(ErrCatalogCall, err))
	}
	if err := sa.st.use(tbl); err != nil {
		return false, err
	}
	return true, sa.opened(ctx)
}

func (sa *schemaApplier) create(ctx context.Context, ev *change.Event) (*table.Table, error) {
	cat := sa.env.cat
	def := sa.st.def
	if def == nil {
		def = sa.env.defs.get(sa.src)
	}
	schema, source, err := buildSchema(def, sa.set, ev)
	if err != nil {
		return nil, mark(ErrUncreatable, fmt.Errorf("schema for %s: %w", sa.src, err))
	}
	props := maps.Clone(tableProperties)
	if v := sa.set.formatVersion; v != 0 {
		props["format-version"] = strconv.Itoa(v)
	}
	maps.Copy(props, dictionaryProps(schema, uniqueText(def, sa.set.columns)))
	props[tableprop.Source] = sa.src
	if def != nil && sa.st.defTS != "" {
		controlTSProp(props, nil, sa.st.defTS)
	}
	for shard, seq := range sa.truncWM {
		props[tableprop.Watermark(sa.env.stream, shard)] = seq
	}
	opts := []catalog.CreateTableOpt{catalog.WithProperties(props)}
	spec, err := sa.set.partitionSpec(schema)
	if err != nil {
		return nil, mark(ErrUncreatable, fmt.Errorf("table %s: %w", sa.src, err))
	}
	if spec != nil {
		opts = append(opts, catalog.WithPartitionSpec(spec))
	}
	ns := sa.ident[:len(sa.ident)-1]
	if err := sa.catalogCall(ctx, func(ctx context.Context) error { return cat.CreateNamespace(ctx, ns, nil) }); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		return nil, mark(ErrCatalogCall, fmt.Errorf("create namespace %v: %w", ns, err))
	}
	var tbl *table.Table
	err = sa.catalogCall(ctx, func(ctx context.Context) (err error) {
		tbl, err = cat.CreateTable(ctx, sa.ident, schema, opts...)
		return err
	})
	if errors.Is(err, catalog.ErrTableAlreadyExists) {
		// Another worker was first, or an earlier attempt whose answer was lost.
		tbl, err = sa.loadTable(ctx)
		if err != nil {
			return nil, mark(ErrCatalogCall, err)
		}
		return tbl, nil
	}
	if err != nil {
		return nil, mark(ErrCatalogCall, err)
	}
	sa.log.Info("created table", zap.String("schema_from", source), zap.Stringer("schema", tbl.Schema()))
	sa.env.metrics.SchemaChanged(sa.name, "create_table", 1)
	return tbl, nil
}

// opened runs after the table was loaded or created: it checks the table's owner (owner.go),
// picks up a dropped mark and applies a configured primary key to a table that has none.
func (sa *schemaApplier) opened(ctx context.Context) error {
	if err := sa.own(ctx); err != nil || sa.st.refused != "" {
		return err
	}
	if sa.st.published().Since.IsZero() {
		sa.st.setStatus(tableprop.StatusActive, "")
	}
	if l := sa.st.lay; l.keyed() {
		key := make([]string, len(l.keyIdx))
		for i, k := range l.keyIdx {
			key[i] = l.names[k]
		}
		if err := sa.set.keyRule(key, "the table's identifier fields"); err != nil {
			sa.st.pause(err.Error()) // its records are dead-lettered until the configuration is fixed
			return nil
		}
	}
	props := sa.st.tbl.Properties()
	if props[tableprop.Status] == tableprop.StatusDropped && sa.env.dropMark {
		sa.st.setStatus(tableprop.StatusDropped, "marked dropped at "+props[tableprop.DroppedAt])
	}
	if len(sa.set.primaryKey) > 0 {
		_, err := sa.ensureKey(ctx, sa.set.primaryKey, "sink.tables primary_key", nil)
		return err
	}
	return nil
}

// addColumns evolves the schema for columns that appear in data but not in the table: they are
// added as optional columns with a type inferred from the value. The rows that may commit are
// committed first, because they were built for the old schema (the others are re-laid).
func (sa *schemaApplier) addColumns(ctx context.Context, ev *change.Event, cols []change.Column) error {
	if err := sa.cm.commitRows(ctx); err != nil {
		return err
	}
	added := 0
	stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
		txn := sa.st.tbl.NewTransaction()
		us := txn.UpdateSchema(true, false)
		names := map[string]bool{}
		for _, c := range cols {
			if _, ok := sa.st.lay.byName[c.Name]; ok || names[c.Name] {
				continue
			}
			names[c.Name] = true
			us.AddColumn([]string{c.Name}, sa.set.inferType(c), "", false, nil)
		}
		tbl, err := sa.st.commitSchema(ctx, txn, us)
		if tbl != nil { // committed (adopting it may still fail)
			added = len(names)
		}
		return tbl, err
	}
	res, err := commit.Run(ctx, sa.env.cat, sa.ident, sa.st.tbl, sa.cm.policy(), commit.Op{
		Name: "add columns to " + sa.name, Stage: stage,
		// Another worker may have added them. The check resolves into a slice of its own: resolve's
		// scratch (planner.cols) is in use under this call.
		Reloaded: sa.st.refreshedUse(func() bool { return len(sa.pl.unknownColumns(ev, sa.st.lay.columnIndexes(ev.Columns, nil))) == 0 }),
	})
	if err != nil || res.Table == nil {
		return err
	}
	sa.log.Info("added columns seen in data", zap.Int("columns", len(cols)), zap.Stringer("schema", res.Table.Schema()))
	sa.env.metrics.SchemaChanged(sa.name, "add_column", added)
	return nil
}
