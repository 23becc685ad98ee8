package checkpoint_test

import (
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/checkpoint/leasetest"
)

type memTable struct{ *checkpoint.MemLeaseTable }

func (m memTable) Worker(_ *testing.T, worker string) leasetest.Store {
	return m.MemLeaseTable.Worker(worker, time.Hour)
}

func (m memTable) Expire(_ *testing.T, shard string) { m.MemLeaseTable.Expire(shard) }

func (m memTable) SetStateVersion(_ *testing.T, shard, v string) {
	m.MemLeaseTable.SetStateVersion(shard, v)
}

func TestMemLeasesKeepTheLeaseContract(t *testing.T) {
	t.Parallel()
	leasetest.Run(t, func(*testing.T) leasetest.Table { return memTable{checkpoint.NewMemLeaseTable()} })
}
