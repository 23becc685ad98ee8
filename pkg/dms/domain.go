package dms

import (
	"strconv"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// Domain is the range of values a column's DMS source type admits where its Iceberg type is
// wider. Iceberg has no unsigned integers: UINT1/UINT2 (and Parquet-style UINT8/UINT16) are
// stored as int, UINT4/UINT32 as long, UINT8/UINT64 (unsigned 64-bit) as decimal(20,0) — all
// of which also hold negatives and larger values, which no source value can be (a DMS that
// renders an unsigned value through a signed type wraps it to a negative number). ConvertIn
// rejects such values so that the record is dead-lettered instead of stored. The timestamp key
// domains (DomainMicros, DomainTimestamp(Tz)Text…, tskey.go) narrow a key column the same way.
type Domain uint8

const (
	// DomainAny: the Iceberg type is the whole constraint.
	DomainAny Domain = iota
	// DomainUint8 .. DomainUint64: 0 to 2^8-1, 2^16-1, 2^32-1, 2^64-1.
	DomainUint8
	DomainUint16
	DomainUint32
	DomainUint64
)

var domainNames = [...]string{DomainAny: "any", DomainUint8: "UINT1 (0 to 255)", DomainUint16: "UINT2 (0 to 65535)",
	DomainUint32: "UINT4 (0 to 4294967295)", DomainUint64: "UINT8 (0 to 18446744073709551615)"}

// String names the domain by its DMS internal type and range.
func (dm Domain) String() string {
	if int(dm) < len(domainNames) {
		return domainNames[dm]
	}
	if s, ok := timestampDomainName(dm); ok {
		return s
	}
	return "domain(" + strconv.Itoa(int(dm)) + ")"
}

// ColumnDomain returns the domain of a table-def column of vocabulary v (see DetectVocabulary).
// UINT8 of an unknown vocabulary, which IcebergType widens to decimal(20,0), gets DomainUint64.
func ColumnDomain(c change.ColumnDef, v Vocabulary) Domain {
	name, _, _, _, _ := normType(c.Type)
	switch name {
	case "UINT1":
		return DomainUint8
	case "UINT2", "UINT16":
		return DomainUint16
	case "UINT4", "UINT32":
		return DomainUint32
	case "UINT64":
		return DomainUint64
	case "UINT8":
		if v == VocabularyParquet {
			return DomainUint8
		}
		return DomainUint64
	}
	return DomainAny
}

// ConvertIn is Convert followed by the check that the value lies in dom. It applies to int,
// long and decimal columns; others (a hashed or masked column is a string) are not checked,
// except timestamp keys: DomainMicros rejects a nonzero digit below the microsecond, and a
// DomainTimestamp(Tz)Text… string column gets the canonical timestamp text (see KeyType).
// A value outside dom is a *ConvertError ("outside the range of the source type UINT8 (0 to
// 18446744073709551615)"). It allocates nothing more than Convert.
func ConvertIn(t iceberg.Type, dom Domain, v change.Value) (Datum, error) {
	if _, _, ok := textDomain(dom); ok {
		return convertTimestampText(t, dom, v)
	}
	d, err := Convert(t, v)
	if err != nil || dom == DomainAny || d.Null {
		return d, err
	}
	if dom == DomainMicros {
		if err := checkMicros(t, v.Text); err != nil {
			return Datum{}, err
		}
		return d, nil
	}
	if !inDomain(t, dom, d) {
		return Datum{}, convErr(t, v.Text, "outside the range of the source type "+dom.String())
	}
	return d, nil
}

func inDomain(t iceberg.Type, dom Domain, d Datum) bool {
	var limit uint64
	switch dom {
	case DomainAny:
		return true
	case DomainUint8:
		limit = 1<<8 - 1
	case DomainUint16:
		limit = 1<<16 - 1
	case DomainUint32:
		limit = 1<<32 - 1
	default:
		limit = 1<<64 - 1
	}
	switch tt := t.(type) {
	case iceberg.Int32Type, iceberg.Int64Type:
		return d.I >= 0 && uint64(d.I) <= limit
	case iceberg.DecimalType:
		if d.Hi < 0 {
			return false
		}
		// The unscaled value (Hi, I) must not exceed limit × 10^scale.
		var lh, ll uint64 = 0, limit
		for k := 0; k < tt.Scale(); k++ {
			if lh > (1<<63-1)/10 {
				return true // the bound exceeds every decimal(38, s) value
			}
			lh, ll = mul10add(lh, ll, 0)
		}
		return uint64(d.Hi) < lh || uint64(d.Hi) == lh && uint64(d.I) <= ll
	}
	return true
}
