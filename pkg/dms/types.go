package dms

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// ErrUnknownType is wrapped by IcebergType for a DMS type name it does not know. IcebergType
// still returns string as the type to fall back to.
var ErrUnknownType = errors.New("unknown DMS type")

// Vocabulary is the family of type names a table-def uses (dms-format.md §7.3).
type Vocabulary uint8

const (
	// VocabularyUnknown: the names seen exist in both vocabularies (or the two are mixed).
	// Ambiguous names are widened: INT8 → long, UINT8 → decimal(20,0).
	VocabularyUnknown Vocabulary = iota
	// VocabularyInternal: DMS internal names (older engines): INT1/2/4/8, WSTRING, DATETIME ...
	// INT8 is an 8-byte integer.
	VocabularyInternal
	// VocabularyParquet: Parquet-style names (engine 3.5.x, serverless): INT8/16/32/64, STRING,
	// TIMESTAMP ... INT8 is a 1-byte integer.
	VocabularyParquet
)

func (v Vocabulary) String() string {
	switch v {
	case VocabularyInternal:
		return "internal"
	case VocabularyParquet:
		return "parquet"
	default:
		return "unknown"
	}
}

// TypeOptions tunes IcebergType.
type TypeOptions struct {
	// TimestampTZ maps DATETIME/TIMESTAMP to timestamptz instead of timestamp. Default false:
	// DMS appends Z to zone-less source values (MySQL DATETIME passes the wall clock through),
	// so the zone-less type with the wall-clock digits is the faithful default.
	TimestampTZ bool
	// IcebergTime maps TIME/TIME32/TIME64 to Iceberg time. Default false: TIME columns are
	// strings holding the source text, because Spark cannot read a table with a time column at
	// all, and MySQL TIME values may exceed 24 hours or be negative.
	IcebergTime bool
}

// normType upper-cases a DMS type name and strips an optional "(a[,b])" suffix, returning the
// numbers in it; na and nb report whether they were present.
func normType(t string) (name string, a, b int, na, nb bool) {
	name = strings.ToUpper(strings.TrimSpace(t))
	if i := strings.IndexByte(name, '('); i >= 0 && strings.HasSuffix(name, ")") {
		args := name[i+1 : len(name)-1]
		name = strings.TrimSpace(name[:i])
		first, second, two := strings.Cut(args, ",")
		if n, err := strconv.Atoi(strings.TrimSpace(first)); err == nil {
			a, na = n, true
		}
		if two {
			if n, err := strconv.Atoi(strings.TrimSpace(second)); err == nil {
				b, nb = n, true
			}
		}
	}
	return name, a, b, na, nb
}

// vocabularyOf reports the vocabulary a single type name belongs to (Unknown when the name
// exists in both or in neither).
func vocabularyOf(name string) Vocabulary {
	switch name {
	case "INT1", "INT2", "INT4", "UINT1", "UINT2", "UINT4", "NUMERIC", "REAL4", "REAL8",
		"WSTRING", "CLOB", "NCLOB", "BYTES", "BLOB", "DATE", "TIME", "DATETIME", "BOOLEAN":
		return VocabularyInternal
	case "INT16", "INT32", "INT64", "UINT16", "UINT32", "UINT64", "DECIMAL", "FLOAT", "DOUBLE",
		"BINARY", "DATE32", "TIME32", "TIME64", "TIMESTAMP", "BOOL":
		return VocabularyParquet
	}
	return VocabularyUnknown // INT8, UINT8, STRING, unknown names
}

// DetectVocabulary decides which vocabulary a table-def uses from the names of all its
// columns. Names that exist in both vocabularies (INT8, UINT8, STRING) do not count; if the
// names point both ways, or nowhere, the result is VocabularyUnknown.
func DetectVocabulary(cols []change.ColumnDef) Vocabulary {
	var internal, parquet bool
	for _, c := range cols {
		name, _, _, _, _ := normType(c.Type)
		switch vocabularyOf(name) {
		case VocabularyInternal:
			internal = true
		case VocabularyParquet:
			parquet = true
		}
	}
	switch {
	case internal && !parquet:
		return VocabularyInternal
	case parquet && !internal:
		return VocabularyParquet
	}
	return VocabularyUnknown
}

// IcebergType maps a table-def column to an Iceberg type.
//
//	INT1 INT2 INT4 (internal), INT8 (parquet) INT16 INT32, UINT1 UINT2, UINT8 (parquet) UINT16 → int
//	INT8 (internal or unknown vocabulary) INT64, UINT4 UINT32                                   → long
//	UINT8 (internal or unknown vocabulary) UINT64                                               → decimal(20,0)
//	NUMERIC DECIMAL with precision p ≤ 38                                                      → decimal(p,s)
//	NUMERIC DECIMAL without precision                                                          → decimal(38,s), decimal(38,10) when s is 0 too
//	NUMERIC DECIMAL with p > 38                                                                → string
//	REAL4 FLOAT → float; REAL8 DOUBLE → double
//	STRING WSTRING CLOB NCLOB → string; BYTES BLOB BINARY → binary
//	JSON JSONB ARRAY INTERVAL UUID XML TEXT (configured columns only; DMS sends these as
//	STRING/WSTRING/NCLOB) → string, keeping the source text exactly
//	DATE DATE32 → date; TIME TIME32 TIME64 → string (time with opts.IcebergTime)
//	DATETIME TIMESTAMP → timestamp (timestamptz with opts.TimestampTZ)
//	BOOLEAN BOOL → boolean
//
// Names are case-insensitive and may carry a "(p[,s])" or "(n)" suffix, which fills precision
// and scale when the ColumnDef has none. A negative scale s (Oracle NUMBER(p,-s)) becomes
// decimal(p+|s|, 0) while that fits 38 digits (string otherwise); a scale above the precision
// becomes decimal(s,s). An unknown name returns the string type together with an error
// wrapping ErrUnknownType, so callers may log and fall back.
func IcebergType(c change.ColumnDef, v Vocabulary, opts TypeOptions) (iceberg.Type, error) {
	name, a, b, na, nb := normType(c.Type)
	switch name {
	case "INT1", "INT2", "INT4", "INT16", "INT32", "UINT1", "UINT2", "UINT16":
		return iceberg.PrimitiveTypes.Int32, nil
	case "INT8":
		if v == VocabularyParquet {
			return iceberg.PrimitiveTypes.Int32, nil
		}
		return iceberg.PrimitiveTypes.Int64, nil
	case "INT64", "UINT4", "UINT32":
		return iceberg.PrimitiveTypes.Int64, nil
	case "UINT8":
		if v == VocabularyParquet {
			return iceberg.PrimitiveTypes.Int32, nil
		}
		return iceberg.DecimalTypeOf(20, 0), nil
	case "UINT64":
		return iceberg.DecimalTypeOf(20, 0), nil
	case "NUMERIC", "DECIMAL":
		p, s := c.Precision, c.Scale
		if p == 0 && s == 0 && na {
			p = a
			if nb {
				s = b
			}
		}
		return decimalType(p, s), nil
	case "REAL4", "FLOAT":
		return iceberg.PrimitiveTypes.Float32, nil
	case "REAL8", "DOUBLE":
		return iceberg.PrimitiveTypes.Float64, nil
	case "STRING", "WSTRING", "CLOB", "NCLOB",
		"JSON", "JSONB", "ARRAY", "INTERVAL", "UUID", "XML", "TEXT":
		return iceberg.PrimitiveTypes.String, nil
	case "BYTES", "BLOB", "BINARY":
		return iceberg.PrimitiveTypes.Binary, nil
	case "DATE", "DATE32":
		return iceberg.PrimitiveTypes.Date, nil
	case "TIME", "TIME32", "TIME64":
		if opts.IcebergTime {
			return iceberg.PrimitiveTypes.Time, nil
		}
		return iceberg.PrimitiveTypes.String, nil
	case "DATETIME", "TIMESTAMP":
		if opts.TimestampTZ {
			return iceberg.PrimitiveTypes.TimestampTz, nil
		}
		return iceberg.PrimitiveTypes.Timestamp, nil
	case "BOOLEAN", "BOOL":
		return iceberg.PrimitiveTypes.Bool, nil
	}
	return iceberg.PrimitiveTypes.String, fmt.Errorf("column %q: %w %q (using string)", c.Name, ErrUnknownType, c.Type)
}

func decimalType(p, s int) iceberg.Type {
	switch {
	case p <= 0:
		// Precision absent: keep the declared scale, or assume 10 fractional digits when the
		// scale is absent too. Values with more digits are rejected by Convert, not rounded.
		if s <= 0 {
			s = 10
		}
		if s > 38 {
			return iceberg.PrimitiveTypes.String
		}
		return iceberg.DecimalTypeOf(38, s)
	case s < 0:
		if p-s > 38 {
			return iceberg.PrimitiveTypes.String
		}
		return iceberg.DecimalTypeOf(p-s, 0)
	case s > p:
		p = s
	}
	if p > 38 {
		return iceberg.PrimitiveTypes.String
	}
	return iceberg.DecimalTypeOf(p, s)
}

// InferType picks a conservative Iceberg type for a column seen in data without any type
// definition: a JSON number that is a plain integer fitting int64 → long; a boolean → boolean;
// everything else (other numbers, whose exact text must survive; strings; JSON; null) → string.
func InferType(v change.Value) iceberg.Type {
	switch v.Kind {
	case change.KindNumber:
		if _, err := strconv.ParseInt(v.Text, 10, 64); err == nil {
			return iceberg.PrimitiveTypes.Int64
		}
	case change.KindBool:
		return iceberg.PrimitiveTypes.Bool
	}
	return iceberg.PrimitiveTypes.String
}
