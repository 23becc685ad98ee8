package sink

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/commit"
)

// The primary key's rules: which columns may be key columns whatever the key comes from
// (configuration, a table-def, the table), and giving a keyless table its key.

// keyRule applies the rules of a configured primary key (TableConfig.validate) to a key from
// elsewhere (from: the table-def, the table): no key column may be excluded (it would not be
// written) or masked (every key would be "****", merging all rows into one). Hashing a key
// column is allowed: the HMAC of distinct values is distinct, so the key stays unique.
func (st *settings) keyRule(key []string, from string) error {
	for _, l := range []struct {
		name string
		cols []string
		why  string
	}{
		{"exclude_columns", st.excludeColumns, "an excluded column is not written"},
		{"mask_columns", st.maskColumns, "masking it would merge every row into one (use hash_columns, or unmask it)"},
	} {
		for i, c := range l.cols {
			if slices.Contains(key, c) {
				return fmt.Errorf("primary key column %q (from %s) is in sink.tables[%s].%s[%d]: %s", c, from, st.tcKey, l.name, i, l.why)
			}
		}
	}
	return nil
}

// ensureKey gives a table without identifier fields the primary key keys (from configuration
// or a create-table table-def): its columns become required identifier fields, so updates and
// deletes apply from then on (earlier ones were dead-lettered and can be replayed). A table that
// already has a key keeps it; a key naming missing, dropped or floating-point columns, or
// columns that a live data file may hold no value for (keyGaps), is not applied (logged,
// counted as primary_key_refused). settled (nil for a configured key) is asked on each table
// refreshed after a failed attempt whether the control record the key comes from no longer
// applies (controlSettled): the commit then ends with landed true, as it does when the
// refreshed table has a key.
func (sa *schemaApplier) ensureKey(ctx context.Context, keys []string, from string, settled func() bool) (landed bool, err error) {
	l := sa.st.lay
	if l.keyed() {
		have := make([]string, len(l.keyIdx))
		for i, k := range l.keyIdx {
			have[i] = l.names[k]
		}
		if !slices.Equal(have, keys) {
			sa.log.Warn("primary key differs from the table's identifier fields; keeping the table's", zap.Strings("table", have), zap.Strings("from", keys), zap.String("source", from))
		}
		return false, nil
	}
	if err := sa.set.keyRule(keys, from); err != nil {
		sa.st.pause(err.Error())
		return false, nil
	}
	states := l.columnStates()
	for _, k := range keys {
		i, ok := l.byName[k]
		if !ok || states[i].Dropped {
			sa.log.Warn("primary key not applied: the table has no such column", zap.String("column", k), zap.String("source", from))
			sa.env.metrics.SchemaChanged(sa.name, "primary_key_refused", 1)
			return false, nil
		}
		if err := keyType(l.schema.Fields()[i]); err != nil {
			sa.log.Warn("primary key not applied", zap.Error(err), zap.String("source", from))
			sa.env.metrics.SchemaChanged(sa.name, "primary_key_refused", 1)
			return false, nil
		}
	}
	if err := sa.cm.commitRows(ctx); err != nil {
		return false, err
	}
	var gaps keyGap
	stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
		// On every attempt, on the table it stages on: the rows just committed, or another
		// worker's, may be such files.
		var err error
		if gaps, err = keyGaps(ctx, sa.st.tbl, keys); err != nil || gaps.files > 0 {
			return nil, err
		}
		txn := sa.st.tbl.NewTransaction()
		us := txn.UpdateSchema(true, true)
		paths := make([][]string, len(keys))
		for i, k := range keys {
			us.UpdateColumn([]string{k}, table.ColumnUpdate{Required: iceberg.Optional[bool]{Valid: true, Val: true}})
			paths[i] = []string{k}
		}
		us.SetIdentifierField(paths)
		return sa.st.commitSchema(ctx, txn, us)
	}
	res, err := commit.Run(ctx, sa.env.cat, sa.ident, sa.st.tbl, sa.cm.policy(), commit.Op{
		Name: "set primary key of " + sa.name, Stage: stage,
		Reloaded: sa.st.refreshedUse(func() bool { return sa.st.lay.keyed() || settled != nil && settled() }),
	})
	if err == nil && gaps.files > 0 {
		then := "reload it at the source (its key applies once the reload replaced the table's content) or rewrite those rows"
		if _, ok := readReload(sa.st.tbl.Properties()); ok {
			sa.afterReload = &keyAfterReload{keys: keys, from: from}
			then = "tried again once the reload in progress replaced the table's content"
		}
		sa.log.Warn("primary key not applied: data files hold no value for a key column (written before the column was added, "+
			"while DMS left NULL columns out, or NULL in it); Iceberg key columns are required and such files would make the table unreadable. "+
			"The table stays keyless: "+then,
			zap.String("column", gaps.column), zap.Int("data_files", gaps.files), zap.Strings("key", keys), zap.String("source", from))
		sa.env.metrics.SchemaChanged(sa.name, "primary_key_refused", 1)
		return false, nil
	}
	if err != nil || res.Table == nil {
		return res.Landed, err
	}
	sa.log.Info("table now has a primary key", zap.Strings("key", keys), zap.String("source", from))
	sa.env.metrics.SchemaChanged(sa.name, "set_primary_key", 1)
	return false, nil
}

// keyGap is what keyGaps found: how many live data files may hold no value for a key column,
// and the first such column.
type keyGap struct {
	files  int
	column string
}

// keyGaps counts the live data files of every branch of tbl that may hold no value for one of
// the columns keys: files written before the column was added (no value count for it: the
// column is not in the file; DMS leaves out NULL columns unless IncludeNullAndEmpty is on) and
// files with NULLs in it. Iceberg key columns (identifier fields) are required, and iceberg-go
// refuses to read a data file that lacks a required column or an equality-delete column, so
// such a key would make every scan of the table fail.
func keyGaps(ctx context.Context, tbl *table.Table, keys []string) (keyGap, error) {
	ids := make([]int, len(keys))
	for i, k := range keys {
		f, ok := tbl.Schema().FindFieldByName(k)
		if !ok {
			return keyGap{files: 1, column: k}, nil
		}
		ids[i] = f.ID
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return keyGap{}, err
	}
	var gap keyGap
	seen := map[string]bool{}
	meta := tbl.Metadata()
	for _, ref := range meta.Refs() {
		snap := meta.SnapshotByID(ref.SnapshotID)
		if ref.SnapshotRefType != table.BranchRef || snap == nil {
			continue
		}
		mans, err := snap.Manifests(fs)
		if err != nil {
			return keyGap{}, err
		}
		for _, mf := range mans {
			if mf.ManifestContent() != iceberg.ManifestContentData {
				continue
			}
			for e, err := range mf.Entries(fs, true) {
				if err != nil {
					return keyGap{}, err
				}
				df := e.DataFile()
				if seen[df.FilePath()] || df.ContentType() != iceberg.EntryContentData {
					continue
				}
				seen[df.FilePath()] = true
				values, nulls := df.ValueCounts(), df.NullValueCounts()
				for i, id := range ids {
					if _, ok := values[id]; !ok || nulls[id] > 0 {
						if gap.files++; gap.column == "" {
							gap.column = keys[i]
						}
						break
					}
				}
			}
		}
	}
	return gap, nil
}

// keyAfterReload is a primary key that ensureKey refused (keyGaps) while a reload was in
// progress: the data files that hold no value for a key column are those of the table before
// the reload, which its replace removes, so the key is tried again after a reload ended with a
// replace (reloadTracker.replaced). A reload cancelled keeps it waiting; a restart forgets it
// (a configured key is tried at every start).
type keyAfterReload struct {
	keys []string
	from string
}

// keyAfterReplace applies the key waiting for a reload's replace (schemaApplier.afterReload)
// once rt saw one.
func (sa *schemaApplier) keyAfterReplace(ctx context.Context, rt *reloadTracker) error {
	k := sa.afterReload
	if k == nil {
		rt.replaced = false // a replace before the key was refused does not count
		return nil
	}
	if !rt.replaced {
		return nil
	}
	sa.afterReload, rt.replaced = nil, false
	_, err := sa.ensureKey(ctx, k.keys, k.from+", after the reload", nil)
	return err
}
