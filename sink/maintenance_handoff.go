package sink

import (
	"context"

	"github.com/apache/iceberg-go/table"
)

// maintainer is all a table writer knows of its table's maintenance (maintenance.Maintainer):
// after each of its commits it calls AfterCommit with the committed table, which may run one
// waiting maintenance commit on that table (two for an equality-delete conversion, whose second
// commit it waits for briefly) and pass each result to adopt (the writer's use), on the writer's
// goroutine.
type maintainer interface {
	AfterCommit(ctx context.Context, tbl *table.Table, adopt func(*table.Table) error)
}
