package dms

import (
	"errors"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

func defs(types ...string) []change.ColumnDef {
	out := make([]change.ColumnDef, len(types))
	for i, t := range types {
		out[i] = change.ColumnDef{Name: "c", Type: t}
	}
	return out
}

func TestDetectVocabulary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		types []string
		want  Vocabulary
	}{
		{[]string{"INT4", "WSTRING", "DATETIME"}, VocabularyInternal},
		{[]string{"INT8", "WSTRING"}, VocabularyInternal},
		{[]string{"int8", "real8"}, VocabularyInternal},
		{[]string{"INT32", "STRING", "TIMESTAMP"}, VocabularyParquet},
		{[]string{"INT8", "INT64"}, VocabularyParquet},
		{[]string{"UINT8", "DOUBLE"}, VocabularyParquet},
		{[]string{"INT8", "STRING"}, VocabularyUnknown},
		{[]string{"INT8"}, VocabularyUnknown},
		{[]string{"INT4", "INT32"}, VocabularyUnknown},
		{[]string{"MYSTERY"}, VocabularyUnknown},
		{nil, VocabularyUnknown},
		{[]string{"NUMERIC(10,2)", "INT8"}, VocabularyInternal},
		{[]string{"DECIMAL", "BOOL"}, VocabularyParquet},
		{[]string{"DATE", "TIME", "BOOLEAN", "BYTES", "BLOB", "CLOB", "NCLOB", "REAL4", "UINT1", "UINT2", "UINT4", "INT1", "INT2"}, VocabularyInternal},
		{[]string{"DATE32", "TIME32", "TIME64", "BINARY", "FLOAT", "UINT16", "UINT32", "UINT64", "INT16"}, VocabularyParquet},
	} {
		if got := DetectVocabulary(defs(tc.types...)); got != tc.want {
			t.Errorf("%v: got %v want %v", tc.types, got, tc.want)
		}
	}
}

func TestIcebergType(t *testing.T) {
	t.Parallel()
	var (
		I, P, U = VocabularyInternal, VocabularyParquet, VocabularyUnknown
		tz      = TypeOptions{TimestampTZ: true}
		none    = TypeOptions{}
	)
	col := func(typ string, p, s int) change.ColumnDef {
		return change.ColumnDef{Name: "c", Type: typ, Precision: p, Scale: s}
	}
	for _, tc := range []struct {
		c    change.ColumnDef
		v    Vocabulary
		opts TypeOptions
		want iceberg.Type
	}{
		// Integers, internal vocabulary.
		{col("INT1", 0, 0), I, none, iceberg.PrimitiveTypes.Int32},
		{col("INT2", 0, 0), I, none, iceberg.PrimitiveTypes.Int32},
		{col("INT4", 0, 0), I, none, iceberg.PrimitiveTypes.Int32},
		{col("INT8", 0, 0), I, none, iceberg.PrimitiveTypes.Int64},
		{col("UINT1", 0, 0), I, none, iceberg.PrimitiveTypes.Int32},
		{col("UINT2", 0, 0), I, none, iceberg.PrimitiveTypes.Int32},
		{col("UINT4", 0, 0), I, none, iceberg.PrimitiveTypes.Int64},
		{col("UINT8", 0, 0), I, none, iceberg.DecimalTypeOf(20, 0)},
		// Integers, Parquet vocabulary.
		{col("INT8", 0, 0), P, none, iceberg.PrimitiveTypes.Int32},
		{col("INT16", 0, 0), P, none, iceberg.PrimitiveTypes.Int32},
		{col("INT32", 0, 0), P, none, iceberg.PrimitiveTypes.Int32},
		{col("INT64", 0, 0), P, none, iceberg.PrimitiveTypes.Int64},
		{col("UINT8", 0, 0), P, none, iceberg.PrimitiveTypes.Int32},
		{col("UINT16", 0, 0), P, none, iceberg.PrimitiveTypes.Int32},
		{col("UINT32", 0, 0), P, none, iceberg.PrimitiveTypes.Int64},
		{col("UINT64", 0, 0), P, none, iceberg.DecimalTypeOf(20, 0)},
		// Ambiguous names with unknown vocabulary widen.
		{col("INT8", 0, 0), U, none, iceberg.PrimitiveTypes.Int64},
		{col("UINT8", 0, 0), U, none, iceberg.DecimalTypeOf(20, 0)},
		{col("int8", 0, 0), U, none, iceberg.PrimitiveTypes.Int64},
		// Decimals.
		{col("NUMERIC", 10, 2), I, none, iceberg.DecimalTypeOf(10, 2)},
		{col("DECIMAL", 38, 0), P, none, iceberg.DecimalTypeOf(38, 0)},
		{col("DECIMAL", 39, 2), P, none, iceberg.PrimitiveTypes.String},
		{col("NUMERIC", 0, 0), I, none, iceberg.DecimalTypeOf(38, 10)},
		{col("NUMERIC", 0, 4), I, none, iceberg.DecimalTypeOf(38, 4)},
		{col("NUMERIC", 5, -2), I, none, iceberg.DecimalTypeOf(7, 0)},
		{col("NUMERIC", 38, -2), I, none, iceberg.PrimitiveTypes.String},
		{col("NUMERIC", 2, 5), I, none, iceberg.DecimalTypeOf(5, 5)},
		{col("NUMERIC(12,3)", 0, 0), I, none, iceberg.DecimalTypeOf(12, 3)},
		{col("NUMERIC(12)", 0, 0), I, none, iceberg.DecimalTypeOf(12, 0)},
		{col("numeric(12, 3)", 9, 1), I, none, iceberg.DecimalTypeOf(9, 1)},
		// Floats.
		{col("REAL4", 0, 0), I, none, iceberg.PrimitiveTypes.Float32},
		{col("FLOAT", 0, 0), P, none, iceberg.PrimitiveTypes.Float32},
		{col("REAL8", 0, 0), I, none, iceberg.PrimitiveTypes.Float64},
		{col("DOUBLE", 0, 0), P, none, iceberg.PrimitiveTypes.Float64},
		// Strings and binary.
		{col("STRING", 0, 0), I, none, iceberg.PrimitiveTypes.String},
		{col("STRING", 0, 0), P, none, iceberg.PrimitiveTypes.String},
		{col("WSTRING", 0, 0), I, none, iceberg.PrimitiveTypes.String},
		{col("WSTRING(255)", 0, 0), I, none, iceberg.PrimitiveTypes.String},
		{col("CLOB", 0, 0), I, none, iceberg.PrimitiveTypes.String},
		{col("NCLOB", 0, 0), I, none, iceberg.PrimitiveTypes.String},
		{col("BYTES", 0, 0), I, none, iceberg.PrimitiveTypes.Binary},
		{col("BLOB", 0, 0), I, none, iceberg.PrimitiveTypes.Binary},
		{col("BINARY", 0, 0), P, none, iceberg.PrimitiveTypes.Binary},
		// Dates and times.
		{col("DATE", 0, 0), I, none, iceberg.PrimitiveTypes.Date},
		{col("DATE32", 0, 0), P, none, iceberg.PrimitiveTypes.Date},
		{col("TIME", 0, 0), I, none, iceberg.PrimitiveTypes.String},
		{col("TIME32", 0, 0), P, none, iceberg.PrimitiveTypes.String},
		{col("TIME64", 0, 0), P, none, iceberg.PrimitiveTypes.String},
		{col("TIME", 0, 0), I, TypeOptions{IcebergTime: true}, iceberg.PrimitiveTypes.Time},
		{col("TIME64", 0, 0), P, TypeOptions{IcebergTime: true}, iceberg.PrimitiveTypes.Time},
		{col("DATETIME", 0, 0), I, none, iceberg.PrimitiveTypes.Timestamp},
		{col("TIMESTAMP", 0, 0), P, none, iceberg.PrimitiveTypes.Timestamp},
		{col("DATETIME", 0, 0), I, tz, iceberg.PrimitiveTypes.TimestampTz},
		{col("TIMESTAMP", 0, 0), P, tz, iceberg.PrimitiveTypes.TimestampTz},
		// Booleans.
		{col("BOOLEAN", 0, 0), I, none, iceberg.PrimitiveTypes.Bool},
		{col("BOOL", 0, 0), P, none, iceberg.PrimitiveTypes.Bool},
	} {
		got, err := IcebergType(tc.c, tc.v, tc.opts)
		if err != nil {
			t.Errorf("%+v %v: %v", tc.c, tc.v, err)
			continue
		}
		if !got.Equals(tc.want) {
			t.Errorf("%s (%v, %+v): got %v want %v", tc.c.Type, tc.v, tc.opts, got, tc.want)
		}
	}
}

func TestIcebergTypeUnknown(t *testing.T) {
	t.Parallel()
	got, err := IcebergType(change.ColumnDef{Name: "geo", Type: "GEOMETRY"}, VocabularyUnknown, TypeOptions{})
	if !errors.Is(err, ErrUnknownType) {
		t.Fatalf("err %v, want ErrUnknownType", err)
	}
	if !got.Equals(iceberg.PrimitiveTypes.String) {
		t.Fatalf("fallback %v, want string", got)
	}
}

func TestInferType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    change.Value
		want iceberg.Type
	}{
		{change.Value{Kind: change.KindNumber, Text: "42"}, iceberg.PrimitiveTypes.Int64},
		{change.Value{Kind: change.KindNumber, Text: "-9223372036854775808"}, iceberg.PrimitiveTypes.Int64},
		{change.Value{Kind: change.KindNumber, Text: "9223372036854775808"}, iceberg.PrimitiveTypes.String},
		{change.Value{Kind: change.KindNumber, Text: "1.5"}, iceberg.PrimitiveTypes.String},
		{change.Value{Kind: change.KindNumber, Text: "1e3"}, iceberg.PrimitiveTypes.String},
		{change.Value{Kind: change.KindNumber, Text: "NaN"}, iceberg.PrimitiveTypes.String},
		{change.Value{Kind: change.KindBool, Text: "true"}, iceberg.PrimitiveTypes.Bool},
		{change.Value{Kind: change.KindString, Text: "12"}, iceberg.PrimitiveTypes.String},
		{change.Value{Kind: change.KindJSON, Text: "{}"}, iceberg.PrimitiveTypes.String},
		{change.Value{Kind: change.KindNull}, iceberg.PrimitiveTypes.String},
	} {
		if got := InferType(tc.v); !got.Equals(tc.want) {
			t.Errorf("%+v: got %v want %v", tc.v, got, tc.want)
		}
	}
}
