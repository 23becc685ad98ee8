package maintenance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The positional branch (Config.PositionalBranch, design.md §10.1). In delete modes position and
// dv the writer still commits one equality-delete file per commit, and a conversion turns them
// positional within PositionDelay; so under steady commits main always holds the last seconds'
// equality deletes, which PyIceberg and other readers refuse, and which iceberg-go's scan
// pays for on every row. The branch never holds one: each conversion, planned on snapshot P,
// moves it to P with P's equality deletes converted (its position deletes added and the equality
// deletes dropped, the same files its two commits on main add and drop, staged once more on P),
// and whenever main holds no equality delete the branch follows main's head. Readers of the
// branch lag main by PositionDelay plus a conversion.

// branchTrigger marks the snapshots the maintainer adds to the positional branch.
const branchTrigger = "positional-branch"

// branchMover moves a table's positional branch: to each conversion's converted snapshot, and to
// main's head whenever main holds no equality delete. The maintenance goroutine alone uses it.
type branchMover struct {
	*maintained
	commits     *committer
	lastPublish time.Time // when the branch last moved
}

// publishConverted moves the positional branch to the converted state of the plan's snapshot, or,
// when the table the conversion left (after) holds no equality delete, to main's head.
func (b *branchMover) publishConverted(ctx context.Context, p *deletes.Plan, after *table.Table, rep *Report) {
	if b.cfg.PositionalBranch == "" {
		return
	}
	if after != nil && noEqualityDeletes(after.CurrentSnapshot()) {
		b.followMain(ctx, after, rep)
		return
	}
	_, err := b.commits.commitDirect(ctx, "positional-branch", func(ctx context.Context, head *table.Table, props iceberg.Properties) (*table.Table, bool, error) {
		return b.publishOn(ctx, p, head, props)
	})
	b.published(err, p.Snap.SnapshotID, "converted", rep)
}

// followMain moves the positional branch to main's head when main holds no equality delete and
// the branch is elsewhere. tbl is a recent table (nil: loaded), checked before anything is handed
// to the writer, so that a branch already in place costs no commit.
func (b *branchMover) followMain(ctx context.Context, tbl *table.Table, rep *Report) {
	branch := b.cfg.PositionalBranch
	if branch == "" {
		return
	}
	if tbl == nil {
		var err error
		if tbl, err = b.cat.LoadTable(ctx, b.ident); err != nil {
			return
		}
	}
	if _, err := branchTarget(tbl, branch); err != nil {
		return // nothing to do
	}
	var target int64
	_, err := b.commits.commitDirect(ctx, "positional-branch", func(ctx context.Context, head *table.Table, props iceberg.Properties) (*table.Table, bool, error) {
		snap, err := branchTarget(head, branch)
		if err != nil {
			return nil, false, err
		}
		target = snap.SnapshotID
		updates := []table.Update{table.NewSetSnapshotRefUpdate(branch, snap.SnapshotID, table.BranchRef, 0, 0, 0)}
		return b.commitRefs(ctx, head, branch, updates, props)
	})
	b.published(err, target, "main", rep)
}

// branchTarget returns main's head when the branch should move to it: main has a snapshot without
// equality deletes, the branch is elsewhere, and the branch does not show a newer state already.
func branchTarget(head *table.Table, branch string) (*table.Snapshot, error) {
	snap := head.CurrentSnapshot()
	if snap == nil || !noEqualityDeletes(snap) {
		return nil, errNothingToDo
	}
	if at := head.Metadata().SnapshotByName(branch); at != nil && (at.SnapshotID == snap.SnapshotID || branchSourceSeq(head.Metadata(), at) > snap.SequenceNumber) {
		return nil, errNothingToDo
	}
	return snap, nil
}

func (b *branchMover) published(err error, snapshot int64, from string, rep *Report) {
	switch {
	case err == nil:
		b.lastPublish = time.Now()
		rep.BranchMoved, rep.BranchSource = true, snapshot
		b.log.Debug("positional branch moved", zap.String("branch", b.cfg.PositionalBranch),
			zap.String("from", from), zap.Int64("snapshot", snapshot))
	case errors.Is(err, errNothingToDo), errors.Is(err, errAlreadyCommitted):
	default:
		// Not a failure of the table: main is right, and the next conversion moves the branch.
		b.log.Info("positional branch not moved; the next conversion moves it", zap.String("from", from), zap.Error(err))
	}
}

// noEqualityDeletes reports whether snap holds no equality delete (its summary's totals).
func noEqualityDeletes(snap *table.Snapshot) bool {
	if snap == nil || snap.Summary == nil {
		return false
	}
	v, ok := snap.Summary.Properties["total-equality-deletes"]
	return ok && v == "0"
}

// BranchSource returns the id of the snapshot of main whose rows snap, a snapshot of the
// positional branch, shows: the planning snapshot of the conversion that added it, or snap itself
// when the branch followed main.
func BranchSource(snap *table.Snapshot) int64 {
	if snap.Summary != nil && snap.Summary.Properties[tableprop.SummaryMaintenanceTrigger] == branchTrigger {
		if id, err := strconv.ParseInt(snap.Summary.Properties[tableprop.SummaryMaintenanceStarting], 10, 64); err == nil {
			return id
		}
	}
	return snap.SnapshotID
}

// BranchBehind is how far behind main the branch of meta shows the table at now: the age of the
// first main snapshot after the one the branch shows (0 when the branch is main's head); ok is
// false when the table has no such branch.
func BranchBehind(meta table.Metadata, branch string, now time.Time) (behind time.Duration, ok bool) {
	at := meta.SnapshotByName(branch)
	if at == nil {
		return 0, false
	}
	head := meta.CurrentSnapshot()
	if head == nil || at.SnapshotID == head.SnapshotID {
		return 0, true
	}
	src := BranchSource(at)
	var next int64 // the timestamp of the first main snapshot after src
	found := false
	for _, s := range table.AncestorsOf(head.SnapshotID, meta.SnapshotByID) {
		if s.SnapshotID == src {
			found = true
			break
		}
		next = s.TimestampMs
	}
	if !found {
		// The snapshot the branch shows is not on main any more (expired): at least as old as
		// the branch's own snapshot.
		next = at.TimestampMs
	}
	if next == 0 {
		return 0, true
	}
	return max(0, now.Sub(time.UnixMilli(next))), true
}

// branchSourceSeq is the sequence number of the main snapshot the branch's head shows: the
// planning snapshot a conversion published, or the head itself when the branch followed main.
func branchSourceSeq(meta table.Metadata, snap *table.Snapshot) int64 {
	if src := meta.SnapshotByID(BranchSource(snap)); src != nil {
		return src.SequenceNumber
	}
	return snap.SequenceNumber
}

// publishOn stages, on head, the branch moved to the plan's snapshot P with P's equality deletes
// converted, and commits it. The snapshots are built by a transaction on the branch of a copy of
// head's metadata in which the branch is at P (what a conversion staged on P would commit), and
// committed as they are with the branch moved to the last, requiring main and the branch
// unchanged since head (the new snapshots' sequence numbers follow head's).
func (b *branchMover) publishOn(ctx context.Context, p *deletes.Plan, head *table.Table, props iceberg.Properties) (*table.Table, bool, error) {
	branch := b.cfg.PositionalBranch
	meta := head.Metadata()
	if meta.SnapshotByID(p.Snap.SnapshotID) == nil {
		return nil, false, errNothingToDo // expired meanwhile: the next conversion moves the branch
	}
	if at := meta.SnapshotByName(branch); at != nil {
		if branchSourceSeq(meta, at) >= p.Snap.SequenceNumber {
			return nil, false, errAlreadyCommitted // the branch shows P or a newer state
		}
	}
	mb, err := table.MetadataBuilderFromBase(meta, head.MetadataLocation())
	if err != nil {
		return nil, false, err
	}
	if err := mb.SetSnapshotRef(branch, p.Snap.SnapshotID, table.BranchRef); err != nil {
		return nil, false, err
	}
	atP, err := mb.Build()
	if err != nil {
		return nil, false, err
	}
	txn := table.New(head.Identifier(), atP, head.MetadataLocation(), head.FS, b.cat).NewTransactionOnBranch(branch)
	summary := iceberg.Properties{tableprop.SummaryMaintenanceTrigger: branchTrigger,
		tableprop.SummaryMaintenanceStarting: strconv.FormatInt(p.Snap.SnapshotID, 10)}
	if len(p.PosDels) > 0 {
		rd := txn.NewRowDelta(summary)
		rd.AddDeletes(p.PosDels...)
		if len(p.ReplacedDVs) > 0 {
			rd.RemoveDeletes(p.ReplacedDVs...)
		}
		if err := rd.Commit(ctx); err != nil {
			return nil, false, fmt.Errorf("stage the position deletes on the branch: %w", err)
		}
	}
	rw := txn.NewRewrite(summary)
	for _, e := range p.EqDels {
		rw.DeleteFile(e.File)
	}
	for _, df := range p.Replaced {
		rw.DeleteFile(df)
	}
	if err := rw.Commit(ctx); err != nil {
		return nil, false, fmt.Errorf("stage the dropped equality deletes on the branch: %w", err)
	}
	staged, err := txn.StagedTable()
	if err != nil {
		return nil, false, err
	}
	var added []table.Snapshot
	for _, s := range staged.Metadata().Snapshots() {
		if meta.SnapshotByID(s.SnapshotID) == nil {
			added = append(added, s)
		}
	}
	slices.SortFunc(added, func(x, y table.Snapshot) int { return int(x.SequenceNumber - y.SequenceNumber) })
	if len(added) == 0 {
		return nil, false, errors.New("staging the positional branch added no snapshot")
	}
	top := added[len(added)-1]
	if !noEqualityDeletes(&top) {
		// Never publish a branch holding an equality delete: it is there for readers that refuse them.
		return nil, false, fmt.Errorf("the converted snapshot of %d still counts equality deletes", p.Snap.SnapshotID)
	}
	updates := make([]table.Update, 0, len(added)+1)
	for i := range added {
		updates = append(updates, table.NewAddSnapshotUpdate(&added[i]))
	}
	updates = append(updates, table.NewSetSnapshotRefUpdate(branch, top.SnapshotID, table.BranchRef, 0, 0, 0))
	return b.commitRefs(ctx, head, branch, updates, props)
}

// commitRefs commits updates (and props) on head, requiring main and the branch where head has
// them. sent is false when nothing reached the catalog.
func (b *branchMover) commitRefs(ctx context.Context, head *table.Table, branch string, updates []table.Update, props iceberg.Properties) (*table.Table, bool, error) {
	meta := head.Metadata()
	var mainID, branchID *int64
	if s := head.CurrentSnapshot(); s != nil {
		mainID = &s.SnapshotID
	}
	if at := meta.SnapshotByName(branch); at != nil {
		branchID = &at.SnapshotID
	}
	reqs := []table.Requirement{
		table.AssertTableUUID(meta.TableUUID()),
		table.AssertRefSnapshotID(table.MainBranch, mainID),
		table.AssertRefSnapshotID(branch, branchID),
	}
	if len(props) > 0 {
		updates = append(updates, table.NewSetPropertiesUpdate(props))
	}
	newMeta, loc, err := b.cat.CommitTable(ctx, head.Identifier(), reqs, updates)
	if err != nil {
		return nil, true, err
	}
	return table.New(head.Identifier(), newMeta, loc, head.FS, b.cat), true, nil
}
