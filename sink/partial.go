package sink

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// Partial update images (absent_columns keep).
//
// Oracle sources without ALL COLUMNS supplemental logging send updates whose data holds only
// the changed columns and the key. With keep, convert records the live columns such an image
// leaves out (row.absent), and each of them takes the value the row had before the update:
//
//  1. plan walks the buffer in arrival order and completes a partial image from the latest
//     earlier image of the same key in the batch (for a primary-key change: of the old key).
//     What that image lacks itself is inherited together with where it would come from. A key
//     deleted earlier in the batch has nothing to keep.
//  2. The surviving images still lacking columns are completed from the rows the table holds:
//     one scan per batch (flush.go → lookup), filtered on the first key column, matched exactly in
//     memory, on the snapshot the commit is staged on. After a conflicting commit the table is
//     refreshed; the lookup is repeated on the new snapshot, and the data files are rewritten
//     when it found other values.
//  3. A key the table does not have either: the absent columns stay NULL (logged per flush).
//
// Inserts and loads are full images, deletes are applied by key, and with the default null mode
// nothing here runs (row.absent stays nil).

// completed returns the values to write for a surviving partial image: its own, with the absent
// columns taken from stored (the table's row; nil when the table does not have it: NULL).
func (cm *committer) completed(r *row, stored []dms.Datum) []dms.Datum {
	if len(r.absent) == 0 || stored == nil {
		return r.vals
	}
	cm.merged = append(cm.merged[:0], r.vals...)
	for _, c := range r.absent {
		if int(c) < len(stored) {
			cm.merged[c] = stored[c]
		}
	}
	return cm.merged
}

// lookup reads the stored rows the batch's partial images need, on the current table, into
// b.fill. changed reports whether the data files written for an earlier lookup (if any) are
// stale: some image completes differently now.
func (cm *committer) lookup(ctx context.Context, b *batch) (changed bool, err error) {
	snap := cm.rt.dataSnapshotID()
	fill, err := cm.storedRows(ctx, b.lookups)
	if err != nil {
		return false, fmt.Errorf("read the rows partial updates of %s keep values from: %w", cm.name, err)
	}
	changed = !b.filled
	if !changed {
		for _, lk := range b.lookups {
			if !sameAbsent(cm.pl.buf.rows.at(lk.row).absent, b.fill[lk.row], fill[lk.row]) {
				changed = true
				break
			}
		}
	}
	b.fill, b.filled, b.fillSnap = fill, true, snap
	return changed, nil
}

func sameAbsent(absent []int32, a, b []dms.Datum) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	for _, c := range absent {
		if a[c] != b[c] {
			return false
		}
	}
	return true
}

// storedRows scans the table once for the keys of lks and returns, per lookup row, the stored
// row of its key (key and the columns some image lacks are filled; a key the table does not
// have is missing from the map). The scan is filtered with IN on the first key column; composite
// keys are matched exactly here. The scanner applies the equality deletes, so it returns the
// current rows.
func (cm *committer) storedRows(ctx context.Context, lks []lookup) (map[int][]dms.Datum, error) {
	l := cm.st.lay
	fill := make(map[int][]dms.Datum, len(lks))
	head := cm.rt.dataHead() // the reload branch's while a reload is in progress
	if len(lks) == 0 || head == nil {
		return fill, nil
	}
	want := make(map[string][]int, len(lks)) // encoded key -> indexes into lks
	firsts := make(map[string]bool, len(lks))
	k0 := l.keyIdx[0]
	lits := make([]iceberg.Literal, 0, len(lks))
	filtered := true
	needed := make([]bool, len(l.names))
	for _, ki := range l.keyIdx {
		needed[ki] = true
	}
	var buf []byte
	for li, lk := range lks {
		buf = encodeKey(l, buf[:0], lk.key)
		want[string(buf)] = append(want[string(buf)], li)
		for _, c := range cm.pl.buf.rows.at(lk.row).absent {
			needed[c] = true
		}
		buf = dms.AppendKey(buf[:0], l.types[k0], lk.key[0])
		if firsts[string(buf)] {
			continue
		}
		firsts[string(buf)] = true
		lit, ok := keyLiteral(l.types[k0], lk.key[0])
		if !ok {
			filtered = false
		}
		lits = append(lits, lit)
	}
	var filter iceberg.BooleanExpression = iceberg.AlwaysTrue{}
	if filtered {
		filter = iceberg.SetPredicate(iceberg.OpIn, iceberg.Reference(l.names[k0]), lits)
	}
	var fields []string
	for i, n := range l.names {
		if needed[i] {
			fields = append(fields, n)
		}
	}
	scan := cm.st.tbl.Scan(table.WithSnapshotID(head.SnapshotID), table.WithRowFilter(filter), table.WithSelectedFields(fields...))
	defer func() { _ = scan.Close() }()
	_, recs, err := scan.ToArrowRecords(ctx)
	if err != nil {
		return nil, err
	}
	cols := make([]arrow.Array, len(l.names))
	for rec, err := range recs {
		if err != nil {
			return nil, err
		}
		for i, n := range l.names {
			cols[i] = nil
			if idx := rec.Schema().FieldIndices(n); len(idx) > 0 && needed[i] {
				cols[i] = rec.Column(idx[0])
			}
		}
		for _, ki := range l.keyIdx {
			if cols[ki] == nil {
				rec.Release()
				return nil, fmt.Errorf("scan returned no key column %s", l.names[ki])
			}
		}
		for r := 0; r < int(rec.NumRows()); r++ {
			buf = buf[:0]
			for _, ki := range l.keyIdx {
				buf = dms.AppendKey(buf, l.types[ki], dms.DatumView(cols[ki], r))
			}
			lis, ok := want[string(buf)]
			if !ok {
				continue
			}
			vals := make([]dms.Datum, len(l.names))
			for ci, a := range cols {
				if a == nil {
					vals[ci].Null = true
					continue
				}
				vals[ci] = dms.DatumAt(a, r)
			}
			for _, li := range lis {
				fill[lks[li].row] = vals
			}
		}
		rec.Release()
	}
	return fill, nil
}

// keyLiteral is the Iceberg literal of a key value for the lookup filter; ok is false for a
// type without one (the lookup then scans unfiltered).
func keyLiteral(t iceberg.Type, d dms.Datum) (iceberg.Literal, bool) {
	switch tt := t.(type) {
	case iceberg.Int32Type:
		return iceberg.Int32Literal(int32(d.I)), true
	case iceberg.Int64Type:
		return iceberg.Int64Literal(d.I), true
	case iceberg.StringType:
		return iceberg.StringLiteral(d.S), true
	case iceberg.DecimalType:
		return iceberg.DecimalLiteral{Val: decimal128.New(d.Hi, uint64(d.I)), Scale: tt.Scale()}, true
	case iceberg.DateType:
		return iceberg.DateLiteral(iceberg.Date(d.I)), true
	case iceberg.TimeType:
		return iceberg.TimeLiteral(iceberg.Time(d.I)), true
	case iceberg.TimestampType, iceberg.TimestampTzType:
		return iceberg.TimestampLiteral(iceberg.Timestamp(d.I)), true
	case iceberg.BooleanType:
		return iceberg.BoolLiteral(d.I != 0), true
	case iceberg.BinaryType:
		return iceberg.BinaryLiteral([]byte(d.S)), true
	case iceberg.FixedType:
		return iceberg.FixedLiteral([]byte(d.S)), true
	case iceberg.UUIDType:
		u, err := uuid.FromBytes([]byte(d.S))
		if err != nil {
			return nil, false
		}
		return iceberg.UUIDLiteral(u), true
	}
	return nil, false
}

// logPartial reports how the batch's partial images were completed.
func (cm *committer) logPartial(b *batch) {
	if b.fromBuffer == 0 && len(b.lookups) == 0 && b.missing == 0 {
		return
	}
	fromTable := 0
	for _, lk := range b.lookups {
		if b.fill[lk.row] != nil {
			fromTable++
		}
	}
	missing := b.missing + len(b.lookups) - fromTable
	cm.env.metrics.PartialImages(cm.name, b.fromBuffer, fromTable, missing)
	log := cm.log.Debug
	if missing > 0 {
		log = cm.log.Info
	}
	log("partial update images completed (absent_columns keep)", zap.Int("from_batch", b.fromBuffer),
		zap.Int("from_table", fromTable), zap.Int("not_found", missing))
}
