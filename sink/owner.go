package sink

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/commit"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// One source per target table. A table's watermarks are per stream and shard
// (dms2iceberg.wm.<stream>.<shard>), not per source: two source tables written to one target
// would cover each other's records (crm.log seq 5 buffered, shop.log commits the shard's
// watermark 10, crm.log's commit then trims seq 5 as already held and acknowledges it) and merge
// their rows by key. So a target table belongs to one source, recorded on the table
// (tableprop.Source) when it is created or first opened, and every record of another source that
// resolves to it is dead-lettered (class target_taken) with a reason naming both sources and the
// settings to fix. Because only the owner ever commits to the table, the watermark keys can stay
// as they are (tables written before keep theirs). The configuration check refuses the
// collisions it can see: two sources it names resolving to one table.

// isGlob reports whether a sink.tables key or sink.include entry is a pattern.
func isGlob(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// validateTargets refuses two source tables the configuration names (exact sink.tables keys and
// exact sink.include entries, not disabled or excluded) that resolve to one target table, names
// compared case-folded (Glue and other catalogs fold case), and a source resolving to the
// dead-letter table. Sources it cannot name (globs, sink.namespace over schemas the file does
// not list) are refused at run time by the table's owner.
func (c Config) validateTargets() error {
	type named struct{ src, field string }
	var srcs []named
	keys := make([]string, 0, len(c.Tables))
	for k := range c.Tables {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !isGlob(k) {
			srcs = append(srcs, named{k, fmt.Sprintf("sink.tables[%s]", k)})
		}
	}
	for i, p := range c.Include {
		if _, ok := c.Tables[p]; !ok && !isGlob(p) {
			srcs = append(srcs, named{p, fmt.Sprintf("sink.include[%d]", i)})
		}
	}
	dl := ""
	if c.DeadLetters.Type == DeadLettersTable {
		dl = strings.ToLower(c.DeadLetters.Namespace + "." + c.DeadLetters.Table)
	}
	owner := map[string]string{}
	for _, s := range srcs {
		if !c.Selected(s.src) {
			continue
		}
		id := c.Target(s.src)
		target := id[0] + "." + id[len(id)-1]
		folded := strings.ToLower(target)
		if folded == dl {
			return fmt.Errorf("%s: the target table %s is the dead-letter table (sink.dead_letters): set namespace or name", s.field, target)
		}
		if o, ok := owner[folded]; ok && o != s.src {
			a, b := o, s.src
			if b < a {
				a, b = b, a
			}
			return fmt.Errorf("%s: sources %s and %s both write the target table %s (names compared case-folded): their watermarks would cover each other's records and their rows would merge; set sink.tables[<source>].namespace or name so that each source has its own table",
				s.field, a, b, target)
		}
		owner[folded] = s.src
	}
	return nil
}

// own runs when the table was loaded or created: a table another source owns refuses this
// writer; a table without an owner (created before owners were recorded, or by someone else)
// is claimed with a properties-only commit, which only one source can win (the catalog commits
// against the metadata it was staged on).
func (sa *schemaApplier) own(ctx context.Context) error {
	owner := sa.st.tbl.Properties()[tableprop.Source]
	if owner == "" {
		stage := func(ctx context.Context, _ *table.Table, _ int) (*table.Table, error) {
			if sa.st.tbl.Properties()[tableprop.Source] != "" {
				return nil, nil // another source claimed it meanwhile
			}
			txn := sa.st.tbl.NewTransaction()
			if err := txn.SetProperties(iceberg.Properties{tableprop.Source: sa.src}); err != nil {
				return nil, fmt.Errorf("stage %s: %w", tableprop.Source, err)
			}
			tbl, err := txn.Commit(ctx)
			if err != nil {
				return nil, err
			}
			return tbl, sa.st.adopt(tbl)
		}
		if _, err := commit.Run(ctx, sa.env.cat, sa.ident, sa.st.tbl, sa.cm.policy(), commit.Op{
			Name: "claim " + sa.name + " for " + sa.src, Stage: stage,
			Reloaded: sa.st.refreshedUse(func() bool { return sa.st.tbl.Properties()[tableprop.Source] != "" }),
		}); err != nil {
			return err
		}
		owner = sa.st.tbl.Properties()[tableprop.Source]
		if owner == sa.src {
			sa.log.Info("claimed table for its source", zap.String("source", sa.src))
		}
	}
	if owner != sa.src {
		sa.st.refuse(owner)
	}
	return nil
}

// refuse makes the writer dead-letter every record of its source: the table belongs to owner.
// The refusal is published as the writer's status only; the table's status metric stays its
// owner's.
func (t *targetTable) refuse(owner string) {
	t.refused = fmt.Sprintf("source %s resolves to the target table %s, which source %s owns (%s): one table takes one source, "+
		"or their watermarks would cover each other's records; set sink.tables[%q].namespace or name (or sink.namespace) so that each source has its own table",
		t.src, t.name, owner, tableprop.Source, t.src)
	t.status = StatusRefused
	t.pubMu.Lock()
	t.pub = TableStatus{Source: t.src, Table: t.name, Status: StatusRefused, Reason: t.refused, Since: time.Now()}
	t.pubMu.Unlock()
	t.log.Error("records of this source are dead-lettered: another source owns the target table", zap.String("source", t.src), zap.String("owner", owner))
}
