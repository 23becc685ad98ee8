package consumer

import (
	"context"
	"errors"
	"time"

	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	par "github.com/vmware/vmware-go-kcl-v2/clientlibrary/partition"
)

// kclCheckpointer is the lease store as the KCL gets it, with the two answers the KCL's wait for
// a child shard's parent (vmware-go-kcl-v2 v1.0.0, waitOnParentShard) needs and the lease store
// alone cannot give. That wait polls the parent's row with FetchCheckpoint, looks at no stop
// channel, and ends the child's consumer on any error:
//   - once the worker is stopping, FetchCheckpoint of a shard this worker does not hold fails
//     (errStopping), so a child still waiting ends and Worker.Shutdown returns instead of waiting
//     for the parent until shutdown_timeout (the KCL's event loop, stopping too, takes no lease);
//   - a shard gone from the stream (retention; the KCL deletes a gone shard's row) answers
//     SHARD_END instead of ErrSequenceIDNotFound, so a child of an expired parent is read again
//     after its lease moved, as the watermark counts a gone parent (design.md §4). A listed shard
//     without a checkpoint keeps the KCL's answer (its child's consumer ends and is started again
//     next round).
type kclCheckpointer struct {
	chk.Checkpointer
	worker   string
	shards   *shardMap
	stopping func() bool
}

// errStopping is FetchCheckpoint's answer, once the worker is stopping, for a shard it does not
// hold.
var errStopping = errors.New("consumer: the worker is stopping")

// FetchCheckpoint is the lease store's, with the two answers above.
func (k kclCheckpointer) FetchCheckpoint(shard *par.ShardStatus) error {
	if shard.GetLeaseOwner() != k.worker && k.stopping() {
		return errStopping
	}
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
