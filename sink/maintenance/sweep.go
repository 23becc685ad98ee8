package maintenance

import (
	"context"
	"errors"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// triggerSweep is the maintenance trigger in the summary of a sweep's commit.
const triggerSweep = "sweep"

// sweeper drops, on a format v3 table, the Parquet position-delete files that no reader applies
// any more: those naming one data file (file_path bounds or referenced_data_file) that has a
// deletion vector, or that is no longer live. The v3 spec has readers ignore position-delete
// files for a data file with a vector, which must hold their positions (this service's do:
// deletes.Plan.addDV). Such files come from before the table became v3 (position mode, other
// engines); a writer's vector merges them but its commit cannot drop them (iceberg-go's
// RowDelta removes vectors only), and with writer vectors no conversion runs that would. Left,
// every scan lists them and every vector planned for their data file reads them again.
type sweeper struct {
	*maintained
	commits *committer
	planner *deletes.Planner
}

// sweep drops the superseded position-delete files of the newest table, in one commit, and
// adds them to rep.
func (s *sweeper) sweep(ctx context.Context, rep *Report) error {
	src, err := s.cat.LoadTable(ctx, s.ident)
	if err != nil {
		return err
	}
	if src.Metadata().Version() < 3 || src.CurrentSnapshot() == nil || s.reloading(src, "sweep") {
		return nil
	}
	drop, err := s.superseded(ctx, src)
	if err != nil || len(drop) == 0 {
		return err
	}
	n := 0
	_, err = s.commits.commit(ctx, "sweep", nil, func(ctx context.Context, txn *table.Transaction, head *table.Table, _ int) error {
		// A file once superseded stays so (a data file's vector is only ever replaced by one
		// holding its positions, or removed with the data file); one dropped meanwhile is not
		// dropped again.
		still, err := s.superseded(ctx, head)
		if err != nil {
			return err
		}
		live := map[string]bool{}
		for _, df := range still {
			live[df.FilePath()] = true
		}
		rw := txn.NewRewrite(iceberg.Properties{tableprop.SummaryMaintenanceTrigger: triggerSweep})
		n = 0
		for _, df := range drop {
			if live[df.FilePath()] {
				rw.DeleteFile(df)
				n++
			}
		}
		if n == 0 {
			return errNothingToDo
		}
		return rw.Commit(ctx)
	})
	if errors.Is(err, errNothingToDo) {
		return nil
	}
	if err != nil {
		return err
	}
	rep.PositionDeletesSwept += n
	s.log.Info("dropped position-delete files that deletion vectors superseded", zap.Int("files", n))
	return nil
}

// superseded lists the live Parquet position-delete files of tbl's current snapshot that name
// one data file which has a live deletion vector or is not live.
func (s *sweeper) superseded(ctx context.Context, tbl *table.Table) ([]iceberg.DataFile, error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	data, _, posDels, err := s.planner.Manifests().LiveFiles(fs, tbl.CurrentSnapshot())
	if err != nil {
		return nil, err
	}
	live := make(map[string]bool, len(data))
	for _, d := range data {
		live[d.File.FilePath()] = true
	}
	vectored := map[string]bool{}
	for _, pd := range posDels {
		if ref := pd.File.ReferencedDataFile(); table.IsDeletionVector(pd.File) && ref != nil {
			vectored[*ref] = true
		}
	}
	var out []iceberg.DataFile
	for _, pd := range posDels {
		if table.IsDeletionVector(pd.File) {
			continue
		}
		path := ""
		if ref := pd.File.ReferencedDataFile(); ref != nil {
			path = *ref
		} else if deletes.SameBounds(pd.File) {
			path = string(pd.File.LowerBoundValues()[deletes.PosPathField])
		}
		if path != "" && (vectored[path] || !live[path]) {
			out = append(out, pd.File)
		}
	}
	return out, nil
}
