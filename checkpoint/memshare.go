package checkpoint

import (
	"context"
	"fmt"
	"time"
)

// The lease-balancing writes of MemLeases, as Leases does them (dynamoshare.go).

// WithBalance makes GetLease consult b (share.go).
func (m *MemLeases) WithBalance(b *Balance) { m.balance = b }

// held is the number of leases this worker holds.
func (m *MemLeases) held() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.epochs)
}

// Reserve marks the shard's lease as being handed off to taker until until, as Leases.Reserve.
func (m *MemLeases) Reserve(_ context.Context, shard string, epoch int64, taker string, until time.Time) error {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	cur := m.t.get(shard)
	if !publishAllowed(cur, m.worker, epoch) {
		return fmt.Errorf("%w (shard %s: not held by %s under epoch %d, or finished)", ErrFenced, shard, m.worker, epoch)
	}
	cur.HandoffTo, cur.HandoffUntil = taker, toMilli(until)
	m.t.rows[shard] = cur
	return nil
}

// Announce writes this worker's presence row, as Leases.Announce.
func (m *MemLeases) Announce(_ context.Context, until time.Time) error {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	m.t.rows[PresenceKey(m.worker)] = LeaseRow{Exists: true, Worker: m.worker, WorkerUntil: toMilli(until)}
	return nil
}

// Withdraw removes this worker's presence row, as Leases.Withdraw.
func (m *MemLeases) Withdraw(context.Context) error {
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	delete(m.t.rows, PresenceKey(m.worker))
	return nil
}
