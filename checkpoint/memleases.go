package checkpoint

import (
	"context"
	"sync"
	"time"

	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	par "github.com/vmware/vmware-go-kcl-v2/clientlibrary/partition"

	"github.com/dms2iceberg/dms2iceberg/pkg/stateversion"
)

// MemLeaseTable is an in-memory lease table, for tests (like hashicorp/raft's InmemStore): the
// workers' MemLeases over one table follow the same rules as Leases over one DynamoDB table
// (see LeaseStore), each operation atomic. Safe for concurrent use.
type MemLeaseTable struct {
	mu   sync.Mutex
	rows map[string]LeaseRow
}

// NewMemLeaseTable returns an empty table.
func NewMemLeaseTable() *MemLeaseTable {
	return &MemLeaseTable{rows: make(map[string]LeaseRow)}
}

// Worker returns worker's view of the table: what NewLeases is over DynamoDB. duration is the
// lease duration.
func (t *MemLeaseTable) Worker(worker string, duration time.Duration) *MemLeases {
	return &MemLeases{t: t, worker: worker, duration: duration, now: time.Now, epochs: make(map[string]int64)}
}

// Expire ends the shard's lease now, as if its owner had stalled past the lease duration: the
// next GetLease of another worker (or of the owner in a new process) is an acquisition. Nothing else of the row changes.
func (t *MemLeaseTable) Expire(shard string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.rows[shard]
	if !ok {
		return
	}
	r.LeaseTimeout = time.Now().Add(-time.Hour).UTC()
	r.LeaseTimeoutText = r.LeaseTimeout.Format(time.RFC3339Nano)
	t.rows[shard] = r
}

// get returns the row of shard (Exists false when there is none). t.mu is held.
func (t *MemLeaseTable) get(shard string) LeaseRow {
	r, ok := t.rows[shard]
	if !ok {
		return LeaseRow{Shard: shard}
	}
	return r
}

// MemLeases is one worker's view of a MemLeaseTable. It implements LeaseStore and the lease
// methods of Leases (GetLease, Get) with the same semantics. Safe for concurrent use.
type MemLeases struct {
	t        *MemLeaseTable
	worker   string
	duration time.Duration
	now      func() time.Time

	mu     sync.Mutex
	epochs map[string]int64 // shard -> epoch of the lease this worker holds

	// balance is the fair share (share.go); nil: none.
	balance *Balance
}

// Epoch returns the epoch under which this worker holds the shard's lease (0 if it does not).
func (m *MemLeases) Epoch(shard string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epochs[shard]
}

// Get returns the shard's row.
func (m *MemLeases) Get(_ context.Context, shard string) (LeaseRow, error) {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	return m.t.get(shard), nil
}

// GetLease takes or renews the lease of a shard for newOwner, as Leases.GetLease does: a
// renewal keeps the epoch, an acquisition increments it, and neither writes the checkpoint.
func (m *MemLeases) GetLease(shard *par.ShardStatus, newOwner string) error {
	now := m.now().UTC()
	if m.balance.refuse(shard.ID, m.Epoch(shard.ID), m.held(), now) {
		return chk.ErrLeaseNotAcquired{}
	}
	m.t.mu.Lock()
	cur := m.t.get(shard.ID)
	epoch, err := leaseEpoch(cur, newOwner, m.Epoch(shard.ID), now)
	if err != nil {
		m.t.mu.Unlock()
		return err
	}
	timeout := now.Add(m.duration)
	if epoch != cur.Epoch { // an acquisition forgets the previous owner's horizon
		cur.ReadHorizon, cur.PendingFrom, cur.HorizonAt = time.Time{}, time.Time{}, time.Time{}
		cur.Pending, cur.Margin = nil, 0
		cur.HandoffTo, cur.HandoffUntil = "", time.Time{}
	}
	cur.Exists, cur.Owner, cur.Epoch, cur.StateVersion = true, newOwner, epoch, stateversion.CurrentText
	cur.LeaseTimeout, cur.LeaseTimeoutText = timeout, timeout.Format(time.RFC3339Nano)
	if shard.ParentShardId != "" {
		cur.Parent = shard.ParentShardId
	}
	m.t.rows[shard.ID] = cur
	m.t.mu.Unlock()

	m.mu.Lock()
	m.epochs[shard.ID] = epoch
	m.mu.Unlock()
	shard.Mux.Lock()
	shard.AssignedTo = newOwner
	shard.LeaseTimeout = timeout
	shard.Mux.Unlock()
	return nil
}

// RemoveLeaseOwner releases the shard's lease as Leases.RemoveLeaseOwner does: this worker
// forgets its epoch, and the row's owner is removed only while it names this worker under it.
func (m *MemLeases) RemoveLeaseOwner(shard string) error {
	m.mu.Lock()
	mine := m.epochs[shard]
	delete(m.epochs, shard)
	m.mu.Unlock()
	m.balance.released(shard)
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	if cur := m.t.get(shard); releaseAllowed(cur, m.worker, mine) {
		cur.Owner = ""
		m.t.rows[shard] = cur
	}
	return nil
}

// Checkpoint writes seq as the shard's checkpoint under the rules of LeaseStore.Checkpoint.
func (m *MemLeases) Checkpoint(_ context.Context, shard string, epoch int64, seq string) error {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	cur := m.t.get(shard)
	if !checkpointAllowed(cur, m.worker, epoch, seq) {
		return refusal(cur, shard, m.worker, epoch, seq)
	}
	cur.Checkpoint = seq
	m.t.rows[shard] = cur
	return nil
}

// PublishHorizon writes h under the rules of LeaseStore.PublishHorizon, at millisecond
// precision as in DynamoDB.
func (m *MemLeases) PublishHorizon(_ context.Context, shard string, epoch int64, h Horizon) error {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	cur := m.t.get(shard)
	if !publishAllowed(cur, m.worker, epoch) {
		return publishRefusal(cur, shard, m.worker, epoch)
	}
	cur.ReadHorizon, cur.PendingFrom, cur.HorizonAt = toMilli(h.Read), toMilli(h.PendingFrom), toMilli(h.At)
	cur.Margin = max(h.Margin.Truncate(time.Millisecond), 0)
	// Stored as DynamoDB stores it: through its encoding.
	cur.Pending, _ = decodePendingTables(h.Pending.encode())
	m.t.rows[shard] = cur
	return nil
}

// toMilli is t as stored: truncated to milliseconds, UTC; zero stays zero (absent).
func toMilli(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

// Rows returns every row of the table, in no particular order.
func (m *MemLeases) Rows(context.Context) ([]LeaseRow, error) {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	rows := make([]LeaseRow, 0, len(m.t.rows))
	for _, r := range m.t.rows {
		rows = append(rows, r)
	}
	return rows, nil
}

// SetStateVersion writes v as the row's state version ("" removes it), as another binary would
// have left it. Nothing else of the row changes.
func (t *MemLeaseTable) SetStateVersion(shard, v string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.rows[shard]; ok {
		r.StateVersion = v
		t.rows[shard] = r
	}
}

// Delete removes the shard's row, as the KCL does for a shard gone from ListShards.
func (t *MemLeaseTable) Delete(shard string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.rows, shard)
}

// ShardFinished reports whether the shard's checkpoint is ShardEnd.
func (m *MemLeases) ShardFinished(ctx context.Context, shard string) (bool, error) {
	r, err := m.Get(ctx, shard)
	return r.Checkpoint == ShardEnd, err
}
