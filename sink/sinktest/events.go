package sinktest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Acks counts the events acknowledged to it (change.Acker).
type Acks struct{ N atomic.Int64 }

// Done acknowledges n events.
func (a *Acks) Done(n int) { a.N.Add(int64(n)) }

// DLQ keeps the dead letters sent to it in memory.
type DLQ struct {
	mu  sync.Mutex
	dls []change.DeadLetter
}

// DeadLetter keeps dl.
func (d *DLQ) DeadLetter(_ context.Context, dl change.DeadLetter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dls = append(d.dls, dl)
	return nil
}

// Letters returns the dead letters kept so far.
func (d *DLQ) Letters() []change.DeadLetter {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]change.DeadLetter(nil), d.dls...)
}

// Event is a change of table schema.table at position seq of shard of stream, with the raw
// record the tests submit, acknowledged to ack.
func Event(stream, shard string, seq int, schema, table string, op change.Op, cols, before []change.Column, ack change.Acker) *change.Event {
	return &change.Event{Schema: schema, Table: table, Op: op, Columns: cols, Before: before,
		Pos: change.Position{Stream: stream, Shard: shard, Seq: fmt.Sprint(seq)}, Raw: []byte(`{"raw":true}`), Ack: ack}
}

// Num is a number column.
func Num(name string, v int) change.Column {
	return change.Column{Name: name, Value: change.Value{Kind: change.KindNumber, Text: fmt.Sprint(v)}}
}

// Str is a string column.
func Str(name, v string) change.Column {
	return change.Column{Name: name, Value: change.Value{Kind: change.KindString, Text: v}}
}

// Col is a column from text: "null" is a null, 'quoted' a string, anything else a number.
func Col(name, text string) change.Column {
	k := change.KindNumber
	if text == "null" {
		return change.Column{Name: name, Value: change.Value{Kind: change.KindNull}}
	}
	if strings.HasPrefix(text, "'") {
		k, text = change.KindString, strings.Trim(text, "'")
	}
	return change.Column{Name: name, Value: change.Value{Kind: k, Text: text}}
}
