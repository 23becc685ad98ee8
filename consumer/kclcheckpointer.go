package consumer

import (
	"context"
	"errors"
	"time"

	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	par "github.com/vmware/vmware-go-kcl-v2/clientlibrary/partition"
)

// kclCheckpointer is the lease store as the KCL gets it: FetchCheckpoint of a shard that is
// gone from the stream and has no row answers SHARD_END instead of ErrSequenceIDNotFound. The
// KCL (vmware-go-kcl-v2 v1.0.0) deletes the row of a shard gone from the stream (retention),
// and a child shard's consumer first waits for its parent (waitOnParentShard), which ends the
// consumer on ErrSequenceIDNotFound: so once a parent had expired, a child whose lease moved
// (a restart, a hand-off) was never read again. A gone parent counts as finished, as the
// watermark counts it (design.md §4). A listed shard without a checkpoint keeps the KCL's
// answer (its child's consumer ends and is started again next round).
type kclCheckpointer struct {
	chk.Checkpointer
	worker string
	shards *shardMap
}

// FetchCheckpoint is the lease store's, with a shard gone from the stream finished.
func (k kclCheckpointer) FetchCheckpoint(shard *par.ShardStatus) error {
	err := k.Checkpointer.FetchCheckpoint(shard)
	if !errors.Is(err, chk.ErrSequenceIDNotFound) || shard.GetLeaseOwner() == k.worker {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, ok, lerr := k.shards.lookup(ctx, shard.ID, false); lerr == nil && !ok {
		shard.SetCheckpoint(chk.ShardEnd) // nothing of it is left to read
		return nil
	}
	return err
}
