package sink

import (
	"context"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

// maintainer is all a table writer knows of its table's maintenance (maintenance.Maintainer):
// after each of its commits it calls AfterCommit with the committed table, which may run one
// waiting maintenance commit on that table (two for an equality-delete conversion, whose second
// commit it waits for briefly) and pass each result to adopt (targetTable.use), on the writer's
// goroutine.
//
// In dv mode the writer also asks it, for each commit attempt, for the batch's deletes as
// deletion vectors on the table it commits on (nil: commit the equality deletes): from the keys
// it holds in memory (VectorsOfKeys, any key or a keyless table's record identity, where no
// equality-delete file is written unless the maintainer declines), else from the batch's
// equality-delete files (Vectors, one integer key column).
type maintainer interface {
	AfterCommit(ctx context.Context, tbl *table.Table, adopt func(*table.Table) error)
	Vectors(ctx context.Context, head *table.Table, eqDels []iceberg.DataFile) (*maintenance.WriterVectors, error)
	VectorsOfKeys(ctx context.Context, head *table.Table, keyIDs []int, keys []deletes.Keys) (*maintenance.WriterVectors, error)
	WritesVectors(head *table.Table) bool
}
