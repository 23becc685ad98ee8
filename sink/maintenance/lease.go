package maintenance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// The per-table maintenance lease (design.md, "Maintenance") lives in two table properties,
// tableprop.MaintenanceOwner and tableprop.MaintenanceUntil.
//
// Catalog commits check requirements on snapshots and schemas, not on properties: a property
// change is applied on top of whatever is current. So an acquisition is validated after its
// commit: every table version between the one it read and its own must not show a live lease
// other than the one it read; otherwise another worker acquired the lease in between and this one
// backs off (its record is then treated as a foreign lease until it ends). The holder renews in
// every maintenance commit and needs no validation while its lease has not ended.

// leaseHolder holds a table's maintenance lease for one Maintainer: it acquires, validates,
// renews and releases it. Its end is atomic: the writer's goroutine checks it before each
// maintenance commit it runs; the rest is the maintenance goroutine's.
type leaseHolder struct {
	*maintained
	owner       string       // cfg.Owner plus a token unique to this process
	ignore      bool         // RunOptions.IgnoreLease
	end         atomic.Int64 // unix nanoseconds: the lease this process validly holds ends then (0: none)
	heldByOther string       // the foreign owner last logged
}

func newLeaseHolder(t *maintained) *leaseHolder {
	var tok [4]byte
	_, _ = rand.Read(tok[:])
	return &leaseHolder{maintained: t, owner: t.cfg.Owner + "#" + hex.EncodeToString(tok[:])}
}

// ReadLease returns the lease recorded in a table's properties: its owner ("<owner>#<token>",
// "" when none) and when it ends unless renewed.
func ReadLease(p iceberg.Properties) (owner string, until time.Time) {
	return p[tableprop.MaintenanceOwner], parseTime(p[tableprop.MaintenanceUntil])
}

// holds reports whether this process holds a lease that is not about to end. The margin covers
// clock skew between workers and the time a commit takes.
func (l *leaseHolder) holds(now time.Time) bool {
	return l.until().After(now.Add(l.cfg.LeaseDuration / 10))
}

// take reports whether this process may maintain the table now, acquiring or renewing the
// lease when needed. tbl is a recent version of the table.
func (l *leaseHolder) take(ctx context.Context, tbl *table.Table) bool {
	if l.ignore {
		return true
	}
	now := time.Now()
	if l.holds(now) && l.until().Sub(now) > l.cfg.LeaseDuration/2 {
		return true
	}
	if !l.holds(now) && l.foreign(tbl.Properties(), now) {
		return false
	}
	ok, err := l.acquire(ctx)
	if err != nil && ctx.Err() == nil {
		l.metrics.MaintenanceFailed(l.name, "lease")
		l.log.Warn("cannot acquire the maintenance lease", zap.Error(err))
	}
	return ok
}

// foreign reports a live lease in props that is not the one this process holds.
func (l *leaseHolder) foreign(props iceberg.Properties, now time.Time) bool {
	owner, until := ReadLease(props)
	if owner == "" || !until.After(now) || (owner == l.owner && until.Equal(l.until())) {
		return false
	}
	if owner != l.heldByOther {
		l.heldByOther = owner
		l.log.Debug("maintenance lease held by another worker", zap.String("owner", owner), zap.Time("until", until))
	}
	return true
}

func (l *leaseHolder) until() time.Time {
	if n := l.end.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

func (l *leaseHolder) set(until time.Time) {
	if until.IsZero() {
		l.end.Store(0)
		return
	}
	l.end.Store(until.UnixNano())
}

// renewWhileRunning keeps the lease renewed, with properties-only commits, while a long run
// (a big compaction) is in progress, until stop is closed.
func (l *leaseHolder) renewWhileRunning(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(l.cfg.LeaseDuration / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		if !l.holds(now) || l.until().Sub(now) > l.cfg.LeaseDuration*3/4 {
			continue
		}
		if until, ok := l.renew(ctx, now); ok && l.holds(time.Now()) {
			l.set(until) // not lost meanwhile (then the record we wrote is foreign to us)
		}
	}
}

// renew commits a renewal of the lease decided at now, bounded by cfg.CommitTimeout.
func (l *leaseHolder) renew(ctx context.Context, now time.Time) (time.Time, bool) {
	ctx, cancel := bounded(ctx, l.cfg)
	defer cancel()
	tbl, err := l.cat.LoadTable(ctx, l.ident)
	if err != nil || tableprop.CheckStateVersion(l.name, tbl.Properties()) != nil {
		return time.Time{}, false
	}
	until := now.Add(l.cfg.LeaseDuration)
	txn := tbl.NewTransaction()
	if err := txn.SetProperties(tableprop.Stamp(l.props(until), tbl.Properties())); err != nil {
		return time.Time{}, false
	}
	if _, err := txn.Commit(ctx); err != nil {
		l.log.Debug("cannot renew the maintenance lease", zap.Error(err))
		return time.Time{}, false
	}
	return until, true
}

func (l *leaseHolder) props(until time.Time) iceberg.Properties {
	return iceberg.Properties{tableprop.MaintenanceOwner: l.owner, tableprop.MaintenanceUntil: formatTime(until)}
}

// acquire acquires or renews the lease with a properties-only commit.
func (l *leaseHolder) acquire(ctx context.Context) (bool, error) {
	ctx, cancel := bounded(ctx, l.cfg)
	defer cancel()
	base, err := l.cat.LoadTable(ctx, l.ident)
	if err != nil {
		return false, err
	}
	return l.acquireOn(ctx, base, time.Now())
}

// acquireOn acquires or renews the lease, deciding on base as read at now.
func (l *leaseHolder) acquireOn(ctx context.Context, base *table.Table, now time.Time) (bool, error) {
	if err := tableprop.CheckStateVersion(l.name, base.Properties()); err != nil {
		return false, err
	}
	renewal := l.holds(now)
	if !renewal && l.foreign(base.Properties(), now) {
		return false, nil
	}
	until := now.Add(l.cfg.LeaseDuration)
	txn := base.NewTransaction()
	if err := txn.SetProperties(tableprop.Stamp(l.props(until), base.Properties())); err != nil {
		return false, err
	}
	committed, err := txn.Commit(ctx)
	if err != nil && committed == nil {
		return false, err
	}
	if !renewal {
		ok, err := validAcquisition(ctx, base, committed, now)
		if !ok {
			l.log.Info("maintenance lease acquisition raced with another worker; backing off", zap.Error(err))
			return false, nil
		}
		l.log.Info("maintenance lease acquired", zap.String("owner", l.owner), zap.Time("until", until))
	}
	l.set(until)
	l.heldByOther = ""
	return true, nil
}

// validAcquisition checks that no table version between base (read before deciding to acquire
// at now) and committed (the acquisition) recorded a live lease other than base's.
func validAcquisition(ctx context.Context, base, committed *table.Table, now time.Time) (bool, error) {
	entries := slices.Collect(committed.Metadata().PreviousFiles())
	idx := slices.IndexFunc(entries, func(e table.MetadataLogEntry) bool { return e.MetadataFile == base.MetadataLocation() })
	if idx < 0 {
		return false, errors.New("the version the acquisition read is no longer in the metadata log")
	}
	bo, bu := ReadLease(base.Properties())
	fs, err := committed.FS(ctx)
	if err != nil {
		return false, err
	}
	for _, e := range entries[idx+1:] {
		f, err := fs.Open(e.MetadataFile)
		if err != nil {
			return false, err
		}
		meta, err := table.ParseMetadata(f)
		_ = f.Close()
		if err != nil {
			return false, fmt.Errorf("read %s: %w", e.MetadataFile, err)
		}
		o, u := ReadLease(meta.Properties())
		if o != "" && u.After(now) && (o != bo || !u.Equal(bu)) {
			return false, fmt.Errorf("%s acquired it concurrently", o)
		}
	}
	return true, nil
}

// release ends a held lease early (at shutdown), so another worker can take over at once.
func (l *leaseHolder) release() {
	if l.ignore || !l.holds(time.Now()) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tbl, err := l.cat.LoadTable(ctx, l.ident)
	if err != nil || tableprop.CheckStateVersion(l.name, tbl.Properties()) != nil {
		return
	}
	txn := tbl.NewTransaction()
	if err := txn.SetProperties(tableprop.Stamp(l.props(time.Now()), tbl.Properties())); err != nil {
		return
	}
	if _, err := txn.Commit(ctx); err != nil {
		l.log.Debug("cannot release the maintenance lease", zap.Error(err))
		return
	}
	l.set(time.Time{})
}
