package consumer

import (
	"errors"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	par "github.com/vmware/vmware-go-kcl-v2/clientlibrary/partition"
)

// rowsCheckpointer is a lease store whose rows are checkpoints by shard; a shard without one
// answers as the KCL's DynamoDB checkpointer does.
type rowsCheckpointer struct {
	chk.Checkpointer
	rows map[string]string
}

func (r rowsCheckpointer) FetchCheckpoint(shard *par.ShardStatus) error {
	cp, ok := r.rows[shard.ID]
	if !ok {
		return chk.ErrSequenceIDNotFound
	}
	shard.SetCheckpoint(cp)
	return nil
}

// A shard gone from the stream without a row is finished (a child's consumer waiting for it
// goes on); a listed shard without a checkpoint and a shard this worker holds keep the lease
// store's answer; once the worker stops, shards it does not hold fail.
func TestKCLCheckpointerFinishesParentsGoneFromTheStream(t *testing.T) {
	t.Parallel()
	f := &fakeKinesis{shards: []ktypes.Shard{{ShardId: aws.String("parent-read")}, {ShardId: aws.String("child"),
		ParentShardId: aws.String("parent-gone")}}}
	stopping := false
	k := kclCheckpointer{Checkpointer: rowsCheckpointer{rows: map[string]string{"child": "5"}}, worker: "w1",
		shards: newShardMap(f, "stream"), stopping: func() bool { return stopping }}
	fetch := func(id, owner string) (*par.ShardStatus, error) {
		s := &par.ShardStatus{ID: id, Mux: &sync.RWMutex{}, AssignedTo: owner}
		return s, k.FetchCheckpoint(s)
	}
	if _, err := fetch("parent-read", ""); !errors.Is(err, chk.ErrSequenceIDNotFound) {
		t.Fatalf("a listed shard without a checkpoint: %v, want the lease store's ErrSequenceIDNotFound", err)
	}
	if s, err := fetch("parent-gone", ""); err != nil || s.GetCheckpoint() != chk.ShardEnd {
		t.Fatalf("a shard gone from the stream: %v, checkpoint %q; want %s", err, s.GetCheckpoint(), chk.ShardEnd)
	}
	if _, err := fetch("parent-read", "w1"); !errors.Is(err, chk.ErrSequenceIDNotFound) {
		t.Fatalf("a shard this worker holds: %v, want the lease store's ErrSequenceIDNotFound", err)
	}
	if s, err := fetch("child", ""); err != nil || s.GetCheckpoint() != "5" {
		t.Fatalf("a shard with a checkpoint: %v, %q", err, s.GetCheckpoint())
	}
	// Once the worker stops, a shard it does not hold fails (a child's wait for it ends); its own
	// shards are read as before.
	stopping = true
	if _, err := fetch("child", ""); !errors.Is(err, errStopping) {
		t.Fatalf("a shard this worker does not hold, while stopping: %v, want errStopping", err)
	}
	if s, err := fetch("child", "w1"); err != nil || s.GetCheckpoint() != "5" {
		t.Fatalf("a shard this worker holds, while stopping: %v, %q", err, s.GetCheckpoint())
	}
}
