package dms

import (
	"github.com/valyala/fastjson"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// imageReader reads the images of a data record on the general path: the data object, whose
// add-before-image-columns columns (Config.BIEnabled) it sets apart, and the before-image
// object. Both land in one column array: data columns from the front, BI columns backwards
// from the end of the data segment, before-image columns after it.
type imageReader struct {
	cfg  Config
	text *eventText

	// Per-record state, cleared when read returns.
	buf   []change.Column
	front int // next data column goes to buf[front]
	back  int // next BI column goes to buf[back] (filled from the end of the data segment)
	bi    int // next before-image column goes to buf[bi]
	err   *DecodeError

	// Method values bound once so that fastjson's Visit does not allocate a closure per record.
	visitDataFn   func(key []byte, v *fastjson.Value)
	visitBeforeFn func(key []byte, v *fastjson.Value)
}

func newImageReader(cfg Config, text *eventText) *imageReader {
	r := &imageReader{cfg: cfg, text: text}
	r.visitDataFn = r.visitData
	r.visitBeforeFn = r.visitBefore
	return r
}

// read reads the data object do and the before-image object bo (nil when absent or empty) of a
// record with operation op, reusing the backing array of cols when it is large enough.
func (r *imageReader) read(do, bo *fastjson.Object, cols []change.Column, op change.Op) (columns, before []change.Column, err *DecodeError) {
	n := do.Len()
	total := n
	if bo != nil {
		total += bo.Len()
	}
	switch {
	case total == 0 && cols == nil:
		r.buf = noColumns // non-nil and empty: data records always have Columns
	case cap(cols) >= total:
		r.buf = cols[:total]
	default:
		r.buf = make([]change.Column, total)
	}
	r.front, r.back, r.err = 0, n-1, nil
	do.Visit(r.visitDataFn)
	if r.err != nil {
		return r.fail()
	}
	// BI columns were written backwards from the end of the data segment; restore JSON order.
	for i, j := r.front, n-1; i < j; i, j = i+1, j-1 {
		r.buf[i], r.buf[j] = r.buf[j], r.buf[i]
	}
	columns = r.buf[:r.front]
	if bo != nil {
		r.bi = n
		bo.Visit(r.visitBeforeFn)
		if r.err != nil {
			return r.fail()
		}
		before = r.buf[n:total:total]
	} else if r.front < n && op == change.OpUpdate {
		before = r.buf[r.front:n:n]
	}
	r.buf = nil
	return columns, before, nil
}

// fail ends a read that found a problem.
func (r *imageReader) fail() (columns, before []change.Column, err *DecodeError) {
	err = r.err
	r.buf, r.err = nil, nil
	return nil, nil, err
}

func (r *imageReader) visitData(key []byte, v *fastjson.Value) {
	if r.err != nil {
		return
	}
	val, ok := r.text.value(v)
	if !ok {
		r.err = decodeErr(ErrSyntax, -1, numberReason("data."+string(key), val.Text))
		return
	}
	if r.cfg.BIEnabled {
		if name, ok := r.cfg.stripBI(key); ok {
			r.buf[r.back] = change.Column{Name: r.text.str(name), Value: val}
			r.back--
			return
		}
	}
	r.buf[r.front] = change.Column{Name: r.text.str(key), Value: val}
	r.front++
}

func (r *imageReader) visitBefore(key []byte, v *fastjson.Value) {
	if r.err != nil {
		return
	}
	val, ok := r.text.value(v)
	if !ok {
		r.err = decodeErr(ErrSyntax, -1, numberReason(r.cfg.BeforeImageField+"."+string(key), val.Text))
		return
	}
	r.buf[r.bi] = change.Column{Name: r.text.str(key), Value: val}
	r.bi++
}
