//go:build integration

package integration

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	kclcfg "github.com/vmware/vmware-go-kcl-v2/clientlibrary/config"
	par "github.com/vmware/vmware-go-kcl-v2/clientlibrary/partition"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
)

// Regression tests for the vmware-go-kcl-v2 v1.0.0 defects of notes/kcl.md §11 that
// checkpoint.Leases guards against. Each drives the real lease table in DynamoDB Local; each would
// fail with the KCL's own checkpointer.

func leaseTable(t *testing.T) string {
	t.Helper()
	RequireEmulators(t)
	name := UniqueName(t.Name())
	ddb := DynamoDB(t)
	_, err := ddb.CreateTable(t.Context(), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String(checkpoint.AttrShardID), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String(checkpoint.AttrShardID), KeyType: ddbtypes.KeyTypeHash}},
		BillingMode:          ddbtypes.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatalf("create lease table: %v", err)
	}
	t.Cleanup(func() { DeleteTable(t, name) })
	return name
}

func leases(t *testing.T, table, worker string, duration time.Duration) *checkpoint.Leases {
	t.Helper()
	ddb := DynamoDB(t)
	cfg := kclcfg.NewKinesisClientLibConfig(table, "stream", "us-east-1", worker).WithTableName(table).
		WithFailoverTimeMillis(int(duration.Milliseconds()))
	return checkpoint.NewLeases(chk.NewDynamoCheckpoint(cfg).WithDynamoDB(ddb), ddb, table, worker, duration)
}

func shardStatus(id, inMemoryCheckpoint string) *par.ShardStatus {
	return &par.ShardStatus{ID: id, Checkpoint: inMemoryCheckpoint, Mux: &sync.RWMutex{}}
}

func stored(t *testing.T, l *checkpoint.Leases, shard string) checkpoint.LeaseRow {
	t.Helper()
	r, err := l.Get(context.Background(), shard)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// §11 item 2 (E2 step 4, E9): the KCL's lease renewal rewrites the whole row with the
// in-memory checkpoint, rolling back a newer checkpoint. Ours never writes it on renewal.
func TestGuardRenewalNeverRollsBackCheckpoint(t *testing.T) {
	table := leaseTable(t)
	a := leases(t, table, "A", 10*time.Second)
	sh := shardStatus("shardId-000000000000", "")
	if err := a.GetLease(sh, "A"); err != nil {
		t.Fatal(err)
	}
	epoch := a.Epoch(sh.ID)
	if err := a.Checkpoint(t.Context(), sh.ID, epoch, "100"); err != nil {
		t.Fatal(err)
	}
	sh.SetCheckpoint("38") // a stale in-memory value, as the KCL keeps it
	if err := a.GetLease(sh, "A"); err != nil {
		t.Fatalf("renewal: %v", err)
	}
	r := stored(t, a, sh.ID)
	if r.Checkpoint != "100" {
		t.Fatalf("renewal rolled the checkpoint back to %q", r.Checkpoint)
	}
	if r.Epoch != epoch {
		t.Fatalf("renewal changed the epoch %d -> %d", epoch, r.Epoch)
	}
}

// §11 items 1 and 4 (E2, E6): a worker that lost its lease can still checkpoint with the KCL.
// Ours refuses: the new owner's acquisition increments the epoch.
func TestGuardZombieCheckpointIsFenced(t *testing.T) {
	table := leaseTable(t)
	a := leases(t, table, "A", 500*time.Millisecond)
	b := leases(t, table, "B", 500*time.Millisecond)
	var lost []string // the consumer makes the shard's processor stale when told
	a.OnLeaseLost(func(shard string) { lost = append(lost, shard) })
	id := "shardId-000000000001"
	if err := a.GetLease(shardStatus(id, ""), "A"); err != nil {
		t.Fatal(err)
	}
	zombieEpoch := a.Epoch(id)
	if err := a.Checkpoint(t.Context(), id, zombieEpoch, "100"); err != nil {
		t.Fatal(err)
	}
	if err := b.GetLease(shardStatus(id, ""), "B"); !errors.As(err, &chk.ErrLeaseNotAcquired{}) {
		t.Fatalf("B took an unexpired lease: %v", err)
	}
	time.Sleep(700 * time.Millisecond) // A stalls past the lease duration
	if err := b.GetLease(shardStatus(id, ""), "B"); err != nil {
		t.Fatalf("B could not take the expired lease: %v", err)
	}
	if b.Epoch(id) != zombieEpoch+1 {
		t.Fatalf("acquisition epoch %d, want %d", b.Epoch(id), zombieEpoch+1)
	}
	err := a.Checkpoint(t.Context(), id, zombieEpoch, "200")
	if !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("zombie checkpoint: %v, want ErrFenced", err)
	}
	if r := stored(t, a, id); r.Checkpoint != "100" || r.Owner != "B" {
		t.Fatalf("row after the zombie's attempt: %+v", r)
	}
	// The zombie's running consumer cannot take the lease back, even once B's lease expired too:
	// its renewal is refused, so the KCL ends that consumer and releases the lease.
	time.Sleep(700 * time.Millisecond)
	if err := a.GetLease(shardStatus(id, ""), "A"); !errors.As(err, &chk.ErrLeaseNotAcquired{}) {
		t.Fatalf("the zombie's renewal took back the lease B took meanwhile: %v", err)
	}
	if len(lost) != 1 || lost[0] != id {
		t.Fatalf("lease-lost notices %v, want one for %s", lost, id)
	}
	if err := a.RemoveLeaseOwner(id); err != nil {
		t.Fatal(err)
	}
	if r := stored(t, a, id); r.Owner != "B" || a.Epoch(id) != 0 {
		t.Fatalf("row after the zombie's release: %+v (its epoch %d), want B's lease untouched", r, a.Epoch(id))
	}
	// The same worker acquiring it afresh gets a new epoch: its own older processor stays fenced.
	if err := a.GetLease(shardStatus(id, ""), "A"); err != nil {
		t.Fatal(err)
	}
	if err := a.Checkpoint(t.Context(), id, zombieEpoch, "300"); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("old processor of a re-acquired lease: %v, want ErrFenced", err)
	}
	if err := a.Checkpoint(t.Context(), id, a.Epoch(id), "300"); err != nil {
		t.Fatalf("current processor: %v", err)
	}
}

// §11 item 3 (E9): checkpoints can move backwards with the KCL. Ours refuses.
func TestGuardCheckpointNeverMovesBackwards(t *testing.T) {
	table := leaseTable(t)
	a := leases(t, table, "A", 10*time.Second)
	id := "shardId-000000000002"
	if err := a.GetLease(shardStatus(id, ""), "A"); err != nil {
		t.Fatal(err)
	}
	e := a.Epoch(id)
	seqs := []string{"49680676645530718379842435000698513630969073433269239810", "49680676645530718379842435000698513630969073433269239999"}
	if err := a.Checkpoint(t.Context(), id, e, seqs[1]); err != nil {
		t.Fatal(err)
	}
	if err := a.Checkpoint(t.Context(), id, e, seqs[0]); !errors.Is(err, checkpoint.ErrRegression) {
		t.Fatalf("backwards checkpoint: %v, want ErrRegression", err)
	}
	if r := stored(t, a, id); r.Checkpoint != seqs[1] {
		t.Fatalf("stored %q", r.Checkpoint)
	}
}

// §11 item 5 (E2 step 5): the KCL writes SHARD_END whenever Checkpoint(nil) is called, and a
// later checkpoint can overwrite SHARD_END. Ours disables the KCL path and never overwrites
// SHARD_END.
func TestGuardShardEndIsDeliberateAndFinal(t *testing.T) {
	table := leaseTable(t)
	a := leases(t, table, "A", 10*time.Second)
	id := "shardId-000000000003"
	sh := shardStatus(id, "")
	if err := a.GetLease(sh, "A"); err != nil {
		t.Fatal(err)
	}
	sh.SetCheckpoint(chk.ShardEnd)
	if err := a.CheckpointSequence(sh); err == nil {
		t.Fatal("the KCL checkpoint path (Checkpoint(nil) = SHARD_END at any time) must be refused")
	}
	if r := stored(t, a, id); r.Checkpoint != "" {
		t.Fatalf("KCL path wrote %q", r.Checkpoint)
	}
	e := a.Epoch(id)
	if err := a.Checkpoint(t.Context(), id, e, checkpoint.ShardEnd); err != nil {
		t.Fatal(err)
	}
	if err := a.Checkpoint(t.Context(), id, e, "123"); err == nil {
		t.Fatal("a checkpoint overwrote SHARD_END")
	}
	fin, err := a.ShardFinished(t.Context(), id)
	if err != nil || !fin {
		t.Fatalf("ShardFinished = %v, %v", fin, err)
	}
}
