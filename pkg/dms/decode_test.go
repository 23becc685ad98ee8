package dms

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// dumpEvent renders the decoded part of an event as deterministic text for golden comparison.
func dumpEvent(ev *change.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s.%s %s\n", ev.Schema, ev.Table, ev.Op)
	m := ev.Meta
	for _, f := range []struct{ k, v string }{
		{"timestamp", m.Timestamp}, {"record-type", m.RecordType}, {"operation", m.Operation},
		{"partition-key-type", m.PartitionKeyType}, {"partition-key-value", m.PartitionKeyValue},
		{"schema-name", m.SchemaName}, {"table-name", m.TableName},
		{"transaction-id", m.TransactionID}, {"transaction-record-id", m.TransactionRecordID},
		{"prev-transaction-id", m.PrevTransactionID}, {"prev-transaction-record-id", m.PrevTransactionRecordID},
		{"commit-timestamp", m.CommitTimestamp}, {"stream-position", m.StreamPosition},
	} {
		if f.v != "" {
			fmt.Fprintf(&b, "meta %s=%q\n", f.k, f.v)
		}
	}
	kinds := map[change.Kind]string{change.KindNull: "null", change.KindNumber: "number",
		change.KindString: "string", change.KindBool: "bool", change.KindJSON: "json"}
	for _, c := range ev.Columns {
		fmt.Fprintf(&b, "col %q %s %q\n", c.Name, kinds[c.Value.Kind], c.Value.Text)
	}
	if ev.Before != nil {
		fmt.Fprintf(&b, "before (%d)\n", len(ev.Before))
	}
	for _, c := range ev.Before {
		fmt.Fprintf(&b, "bi %q %s %q\n", c.Name, kinds[c.Value.Kind], c.Value.Text)
	}
	if ev.Control != nil {
		fmt.Fprintf(&b, "control %q\n", ev.Control.Op)
		if td := ev.Control.TableDef; td != nil {
			for _, c := range td.Columns {
				fmt.Fprintf(&b, "def %q %s len=%d p=%d s=%d null=%t\n", c.Name, c.Type, c.Length, c.Precision, c.Scale, c.Nullable)
			}
			fmt.Fprintf(&b, "pk %q\n", td.PrimaryKey)
		}
	}
	return b.String()
}

type decodeCase struct {
	name string
	cfg  *Config // nil: DefaultConfig()
	in   string
	want string    // dump on success
	kind ErrorKind // non-zero: expected error kind
	off  int       // expected offset when kind != 0 (use -2 to skip the check)
	// reason, when set, must be contained in the error's Reason (it names the column).
	reason string
}

var biCfg = Config{BeforeImageField: "before-image", BIPrefix: "BI_", BIEnabled: true}
var biSuffixCfg = Config{BeforeImageField: "before-image", BIPrefix: "", BISuffix: "__old", BIEnabled: true}
var customBeforeCfg = Config{BeforeImageField: "old", BIPrefix: "BI_"}

const metaTail = `"schema-name":"public","table-name":"t"}}`

var decodeCases = []decodeCase{
	{
		name: "load pretty printed (json format)",
		in: `{
	"data":	{
		"id":	393,
		"name":	"Grüße",
		"price":	1234.50,
		"created":	"2024-07-29T00:58:44.895275Z"
	},
	"metadata":	{
		"timestamp":	"2024-07-29T00:58:44.895275Z",
		"record-type":	"data",
		"operation":	"load",
		"partition-key-type":	"primary-key",
		"partition-key-value":	"public.demo.393",
		"schema-name":	"public",
		"table-name":	"demo"
	}
}
`,
		want: `public.demo load
meta timestamp="2024-07-29T00:58:44.895275Z"
meta record-type="data"
meta operation="load"
meta partition-key-type="primary-key"
meta partition-key-value="public.demo.393"
meta schema-name="public"
meta table-name="demo"
col "id" number "393"
col "name" string "Grüße"
col "price" number "1234.50"
col "created" string "2024-07-29T00:58:44.895275Z"
`,
	},
	{
		name: "insert one line with transaction details (json-unformatted)",
		in:   `{"metadata":{"timestamp":"2019-10-31T22:53:59.721201Z","record-type":"data","operation":"insert","partition-key-type":"schema-table","schema-name":"testdb","table-name":"t1","transaction-id":9324410911751,"transaction-record-id":1,"prev-transaction-id":9324410910341,"prev-transaction-record-id":10,"commit-timestamp":"2019-10-31T22:53:55.000000Z","stream-position":"mysql-bin-changelog.002171:36912271:0:36912333:9324410911751:mysql-bin-changelog.002171:36912181"},"data":{"id":1,"big":9007199254740993,"sci":1.2345678901234568E+18,"neg":-0.001}}` + "\n",
		want: `testdb.t1 insert
meta timestamp="2019-10-31T22:53:59.721201Z"
meta record-type="data"
meta operation="insert"
meta partition-key-type="schema-table"
meta schema-name="testdb"
meta table-name="t1"
meta transaction-id="9324410911751"
meta transaction-record-id="1"
meta prev-transaction-id="9324410910341"
meta prev-transaction-record-id="10"
meta commit-timestamp="2019-10-31T22:53:55.000000Z"
meta stream-position="mysql-bin-changelog.002171:36912271:0:36912333:9324410911751:mysql-bin-changelog.002171:36912181"
col "id" number "1"
col "big" number "9007199254740993"
col "sci" number "1.2345678901234568E+18"
col "neg" number "-0.001"
`,
	},
	{
		name: "transaction-id as string (Oracle/SQL Server), null metadata field is absent",
		in:   `{"metadata":{"record-type":"data","operation":"insert","schema-name":"S","table-name":"T","transaction-id":"0a001b00c4d2","commit-timestamp":null},"data":{"ID":1}}`,
		want: "S.T insert\nmeta record-type=\"data\"\nmeta operation=\"insert\"\nmeta schema-name=\"S\"\nmeta table-name=\"T\"\nmeta transaction-id=\"0a001b00c4d2\"\ncol \"ID\" number \"1\"\n",
	},
	{
		name: "update with before-image key change",
		in:   `{"data":{"id":2,"v":"x"},"before-image":{"id":1},"metadata":{"record-type":"data","operation":"update",` + metaTail,
		want: "public.t update\nmeta record-type=\"data\"\nmeta operation=\"update\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"id\" number \"2\"\ncol \"v\" string \"x\"\nbefore (1)\nbi \"id\" number \"1\"\n",
	},
	{
		name: "update with empty before-image (pk-only, key unchanged)",
		in:   `{"data":{"id":2},"before-image":{},"metadata":{"record-type":"data","operation":"update",` + metaTail,
		want: "public.t update\nmeta record-type=\"data\"\nmeta operation=\"update\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"id\" number \"2\"\n",
	},
	{
		name: "update with null before-image",
		in:   `{"data":{"id":2},"before-image":null,"metadata":{"record-type":"data","operation":"update",` + metaTail,
		want: "public.t update\nmeta record-type=\"data\"\nmeta operation=\"update\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"id\" number \"2\"\n",
	},
	{
		name: "custom before-image field name",
		cfg:  &customBeforeCfg,
		in:   `{"data":{"id":2},"old":{"id":1,"v":null},"before-image":{"id":99},"metadata":{"record-type":"data","operation":"update",` + metaTail,
		want: "public.t update\nmeta record-type=\"data\"\nmeta operation=\"update\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"id\" number \"2\"\nbefore (2)\nbi \"id\" number \"1\"\nbi \"v\" null \"\"\n",
	},
	{
		name: "delete with nulls (IncludeNullAndEmpty, PG default replica identity)",
		in:   `{"data":{"id":7,"name":null,"age":null},"metadata":{"record-type":"data","operation":"delete","transaction-id":1139,` + metaTail,
		want: "public.t delete\nmeta record-type=\"data\"\nmeta operation=\"delete\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\nmeta transaction-id=\"1139\"\ncol \"id\" number \"7\"\ncol \"name\" null \"\"\ncol \"age\" null \"\"\n",
	},
	{
		name: "BI columns on update become Before (JSON order kept)",
		cfg:  &biCfg,
		in:   `{"data":{"BI_id":1,"id":2,"BI_name":"a","name":"b","BI_":"not a BI column","xBI_y":3},"metadata":{"record-type":"data","operation":"update",` + metaTail,
		want: "public.t update\nmeta record-type=\"data\"\nmeta operation=\"update\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"id\" number \"2\"\ncol \"name\" string \"b\"\ncol \"BI_\" string \"not a BI column\"\ncol \"xBI_y\" number \"3\"\nbefore (2)\nbi \"id\" number \"1\"\nbi \"name\" string \"a\"\n",
	},
	{
		name: "BI columns on insert are dropped, no Before",
		cfg:  &biCfg,
		in:   `{"data":{"id":2,"BI_id":null},"metadata":{"record-type":"data","operation":"insert",` + metaTail,
		want: "public.t insert\nmeta record-type=\"data\"\nmeta operation=\"insert\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"id\" number \"2\"\n",
	},
	{
		name: "BI columns with suffix and empty prefix",
		cfg:  &biSuffixCfg,
		in:   `{"data":{"id":2,"id__old":1,"__old":5},"metadata":{"record-type":"data","operation":"update",` + metaTail,
		want: "public.t update\nmeta record-type=\"data\"\nmeta operation=\"update\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"id\" number \"2\"\ncol \"__old\" number \"5\"\nbefore (1)\nbi \"id\" number \"1\"\n",
	},
	{
		name: "BI columns ignored when BIEnabled is false",
		in:   `{"data":{"id":2,"BI_id":1},"metadata":{"record-type":"data","operation":"update",` + metaTail,
		want: "public.t update\nmeta record-type=\"data\"\nmeta operation=\"update\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"id\" number \"2\"\ncol \"BI_id\" number \"1\"\n",
	},
	{
		name: "before-image object wins over BI columns",
		cfg:  &biCfg,
		in:   `{"data":{"id":2,"BI_id":1},"before-image":{"id":0},"metadata":{"record-type":"data","operation":"update",` + metaTail,
		want: "public.t update\nmeta record-type=\"data\"\nmeta operation=\"update\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"id\" number \"2\"\nbefore (1)\nbi \"id\" number \"0\"\n",
	},
	{
		name: "value kinds: escapes, unicode, surrogates, bool, null, nested JSON kept compact",
		in: `{"metadata":{"record-type":"data","operation":"insert",` + metaTail[:len(metaTail)-2] + `},"data":{
  "s": "a\"b\\c\/d\n\t\u00e9\ud83d\ude00",
  "t": true, "f": false, "n": null, "e": "",
  "obj": { "a" : [1, 2.50, {"b": "x\"y"}], "c" : null },
  "arr": [ ],
  "k\u0065y": 1,
  "nan": "NaN", "inf": "-Infinity",
  "exp": -1.5e-7, "zero": -0
}}`,
		want: "public.t insert\nmeta record-type=\"data\"\nmeta operation=\"insert\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\n" +
			`col "s" string "a\"b\\c/d\n\té😀"` + "\n" +
			`col "t" bool "true"` + "\n" +
			`col "f" bool "false"` + "\n" +
			`col "n" null ""` + "\n" +
			`col "e" string ""` + "\n" +
			`col "obj" json "{\"a\":[1,2.50,{\"b\":\"x\\\"y\"}],\"c\":null}"` + "\n" +
			`col "arr" json "[]"` + "\n" +
			`col "key" number "1"` + "\n" +
			`col "nan" string "NaN"` + "\n" +
			`col "inf" string "-Infinity"` + "\n" +
			`col "exp" number "-1.5e-7"` + "\n" +
			`col "zero" number "-0"` + "\n",
	},
	{
		name: "map-record-to-document _doc is flattened",
		in:   `{"data":{"_doc":{"id":1,"name":"x"}},"metadata":{"record-type":"data","operation":"load",` + metaTail,
		want: "public.t load\nmeta record-type=\"data\"\nmeta operation=\"load\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"id\" number \"1\"\ncol \"name\" string \"x\"\n",
	},
	{
		name: "_doc that is not an object stays a column",
		in:   `{"data":{"_doc":"x"},"metadata":{"record-type":"data","operation":"load",` + metaTail,
		want: "public.t load\nmeta record-type=\"data\"\nmeta operation=\"load\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"_doc\" string \"x\"\n",
	},
	{
		name: "_doc next to other keys stays a column",
		in:   `{"data":{"_doc":{"a":1},"id":1},"metadata":{"record-type":"data","operation":"load",` + metaTail,
		want: "public.t load\nmeta record-type=\"data\"\nmeta operation=\"load\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"_doc\" json \"{\\\"a\\\":1}\"\ncol \"id\" number \"1\"\n",
	},
	{
		name: "empty data object",
		in:   `{"data":{},"metadata":{"record-type":"data","operation":"insert",` + metaTail,
		want: "public.t insert\nmeta record-type=\"data\"\nmeta operation=\"insert\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\n",
	},
	{
		name: "empty schema-name allowed on data records",
		in:   `{"data":{"a":1},"metadata":{"record-type":"data","operation":"insert","schema-name":"","table-name":"t"}}`,
		want: ".t insert\nmeta record-type=\"data\"\nmeta operation=\"insert\"\nmeta table-name=\"t\"\ncol \"a\" number \"1\"\n",
	},
	{
		name: "unknown top-level and metadata keys are ignored",
		in:   `{"x":{"y":1},"data":{"a":1},"metadata":{"future":{"z":true},"record-type":"data","operation":"insert",` + metaTail,
		want: "public.t insert\nmeta record-type=\"data\"\nmeta operation=\"insert\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncol \"a\" number \"1\"\n",
	},
	{
		name: "create-table with table-def (Parquet vocabulary, 3.5.x capture)",
		in: `{
  "control": {
    "table-def": {
      "columns": {
        "id": {"type": "INT32", "nullable": false},
        "name": {"type": "STRING", "length": 255, "nullable": true},
        "amount": {"type": "DECIMAL", "precision": 12, "scale": 2},
        "ts": {"type": "TIMESTAMP", "nullable": "false"},
        "attributes": {"type": "STRING"}
      },
      "primary-key": ["id"],
      "collation-name": "latin1_swedish_ci"
    }
  },
  "metadata": {
    "timestamp": "2024-07-29T00:30:47.266581Z",
    "record-type": "control",
    "operation": "create-table",
    "partition-key-type": "task-id",
    "partition-key-value": "serv-res-id-1722195358878-yhru",
    "schema-name": "public",
    "table-name": "demo"
  }
}`,
		want: `public.demo control
meta timestamp="2024-07-29T00:30:47.266581Z"
meta record-type="control"
meta operation="create-table"
meta partition-key-type="task-id"
meta partition-key-value="serv-res-id-1722195358878-yhru"
meta schema-name="public"
meta table-name="demo"
control "create-table"
def "id" INT32 len=0 p=0 s=0 null=false
def "name" STRING len=255 p=0 s=0 null=true
def "amount" DECIMAL len=0 p=12 s=2 null=true
def "ts" TIMESTAMP len=0 p=0 s=0 null=false
def "attributes" STRING len=0 p=0 s=0 null=true
pk ["id"]
`,
	},
	{
		name: "create-table internal vocabulary, composite key, numeric strings",
		in:   `{"control":{"table-def":{"columns":{"a":{"type":"INT8","nullable":false},"b":{"type":"WSTRING","length":"20"},"c":{"type":"NUMERIC","precision":"10","scale":"-2"}},"primary-key":["a","b"]}},"metadata":{"record-type":"control","operation":"create-table","schema-name":"db","table-name":"t"}}`,
		want: "db.t control\nmeta record-type=\"control\"\nmeta operation=\"create-table\"\nmeta schema-name=\"db\"\nmeta table-name=\"t\"\ncontrol \"create-table\"\ndef \"a\" INT8 len=0 p=0 s=0 null=false\ndef \"b\" WSTRING len=20 p=0 s=0 null=true\ndef \"c\" NUMERIC len=0 p=10 s=-2 null=true\npk [\"a\" \"b\"]\n",
	},
	{
		name: "control record without control key (IncludeControlDetails=false)",
		in:   `{"metadata":{"timestamp":"2021-01-01T00:00:00.000000Z","record-type":"control","operation":"create-table","partition-key-type":"task-id","schema-name":"","table-name":"awsdms_apply_exceptions"}}`,
		want: ".awsdms_apply_exceptions control\nmeta timestamp=\"2021-01-01T00:00:00.000000Z\"\nmeta record-type=\"control\"\nmeta operation=\"create-table\"\nmeta partition-key-type=\"task-id\"\nmeta table-name=\"awsdms_apply_exceptions\"\ncontrol \"create-table\"\n",
	},
	{
		name: "drop-table with empty control object",
		in:   `{"control":{},"metadata":{"record-type":"control","operation":"drop-table","schema-name":"public","table-name":"t"}}`,
		want: "public.t control\nmeta record-type=\"control\"\nmeta operation=\"drop-table\"\nmeta schema-name=\"public\"\nmeta table-name=\"t\"\ncontrol \"drop-table\"\n",
	},
	{
		name: "task-level control record without schema and table",
		in:   `{"metadata":{"record-type":"control","operation":"task-restart"}}`,
		want: ". control\nmeta record-type=\"control\"\nmeta operation=\"task-restart\"\ncontrol \"task-restart\"\n",
	},
	{
		name: "alter control ops pass through",
		in:   `{"control":{"table-def":{"columns":{"a":{"type":"INT4"},"b":{"type":"REAL8"}}}},"metadata":{"record-type":"control","operation":"add-column","schema-name":"s","table-name":"t"}}`,
		want: "s.t control\nmeta record-type=\"control\"\nmeta operation=\"add-column\"\nmeta schema-name=\"s\"\nmeta table-name=\"t\"\ncontrol \"add-column\"\ndef \"a\" INT4 len=0 p=0 s=0 null=true\ndef \"b\" REAL8 len=0 p=0 s=0 null=true\npk []\n",
	},
	{
		name: "control ops rename-table, drop-column, rename-column, column-type-change, change-columns",
		in:   `{"metadata":{"record-type":"control","operation":"change-columns","schema-name":"s","table-name":"t"}}`,
		want: "s.t control\nmeta record-type=\"control\"\nmeta operation=\"change-columns\"\nmeta schema-name=\"s\"\nmeta table-name=\"t\"\ncontrol \"change-columns\"\n",
	},
	{
		name: "truncate as a data record is a control record; its data is ignored",
		in:   `{"data":{"id":1},"metadata":{"record-type":"data","operation":"truncate","schema-name":"s","table-name":"t","transaction-id":7}}`,
		want: "s.t control\nmeta record-type=\"data\"\nmeta operation=\"truncate\"\nmeta schema-name=\"s\"\nmeta table-name=\"t\"\nmeta transaction-id=\"7\"\ncontrol \"truncate\"\n",
	},
	{
		name: "truncate as a data record without data",
		in:   `{"metadata":{"record-type":"data","operation":"TruncateTable","schema-name":"s","table-name":"t"}}`,
		want: "s.t control\nmeta record-type=\"data\"\nmeta operation=\"TruncateTable\"\nmeta schema-name=\"s\"\nmeta table-name=\"t\"\ncontrol \"TruncateTable\"\n",
	},
	{name: "truncate data record without a table", in: `{"metadata":{"record-type":"data","operation":"truncate","schema-name":"s","table-name":""}}`, kind: ErrMissingMetadata, off: -1},

	// Malformed input, one per ErrorKind (and then some).
	{name: "empty input", in: ``, kind: ErrEmpty, off: 0},
	{name: "whitespace only", in: " \n\t\r\n", kind: ErrEmpty, off: 0},
	{name: "KPL aggregated", in: "\xF3\x89\x9A\xC2\x0a\x01", kind: ErrAggregated, off: 0},
	{name: "truncated JSON", in: `{"metadata":{"record-type":"data"`, kind: ErrSyntax, off: 33},
	{name: "garbage", in: `{"metadata" 1}`, kind: ErrSyntax, off: 12},
	{name: "trailing garbage", in: `{"metadata":{}} x`, kind: ErrSyntax, off: 16},
	{name: "two records concatenated", in: "{}\n{}", kind: ErrSyntax, off: 3},
	{name: "top-level array", in: `[{"metadata":{}}]`, kind: ErrNotObject, off: 0},
	{name: "top-level string", in: ` "x"`, kind: ErrNotObject, off: 1},
	{name: "no metadata", in: `{"data":{"a":1}}`, kind: ErrMissingMetadata, off: -1},
	{name: "metadata not an object", in: `{"metadata":"data"}`, kind: ErrBadField, off: -1},
	{name: "metadata null", in: `{"metadata":null}`, kind: ErrBadField, off: -1},
	{name: "record-type missing", in: `{"data":{},"metadata":{"operation":"insert",` + metaTail, kind: ErrMissingMetadata, off: -1},
	{name: "record-type null", in: `{"data":{},"metadata":{"record-type":null,"operation":"insert",` + metaTail, kind: ErrMissingMetadata, off: -1},
	{name: "operation missing", in: `{"data":{},"metadata":{"record-type":"data",` + metaTail, kind: ErrMissingMetadata, off: -1},
	{name: "table-name missing on data", in: `{"data":{},"metadata":{"record-type":"data","operation":"insert","schema-name":"s"}}`, kind: ErrMissingMetadata, off: -1},
	{name: "schema-name missing on data", in: `{"data":{},"metadata":{"record-type":"data","operation":"insert","table-name":"t"}}`, kind: ErrMissingMetadata, off: -1},
	{name: "table-name empty on data", in: `{"data":{},"metadata":{"record-type":"data","operation":"insert","schema-name":"s","table-name":""}}`, kind: ErrBadField, off: -1},
	{name: "unknown record-type", in: `{"data":{},"metadata":{"record-type":"heartbeat","operation":"insert",` + metaTail, kind: ErrUnknownRecordType, off: -1},
	{name: "legacy data operation name", in: `{"data":{},"metadata":{"record-type":"data","operation":"create",` + metaTail, kind: ErrUnknownOperation, off: -1},
	{name: "control operation on a data record", in: `{"data":{},"metadata":{"record-type":"data","operation":"create-table",` + metaTail, kind: ErrUnknownOperation, off: -1},
	{name: "operation case matters", in: `{"data":{},"metadata":{"record-type":"data","operation":"INSERT",` + metaTail, kind: ErrUnknownOperation, off: -1},
	{name: "data missing", in: `{"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrMissingData, off: -1},
	{name: "data null", in: `{"data":null,"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrMissingData, off: -1},
	{name: "data not an object", in: `{"data":[1,2],"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrBadField, off: -1},
	{name: "before-image not an object", in: `{"data":{},"before-image":"x","metadata":{"record-type":"data","operation":"update",` + metaTail, kind: ErrBadField, off: -1},
	{name: "metadata field boolean", in: `{"data":{},"metadata":{"record-type":"data","operation":"insert","transaction-id":true,` + metaTail, kind: ErrBadField, off: -1},
	{name: "metadata field object", in: `{"data":{},"metadata":{"record-type":{"x":1},"operation":"insert",` + metaTail, kind: ErrBadField, off: -1},
	{name: "number with leading zero", in: `{"data":{"a":01},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: -1},
	{name: "number with trailing dot", in: `{"data":{"a":1.},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: -1},
	{name: "number with plus sign", in: `{"data":{"a":+1},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: -1},
	{name: "number double minus", in: `{"data":{"a":--1},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: -1},
	{name: "malformed number in metadata", in: `{"data":{},"metadata":{"record-type":"data","operation":"insert","transaction-id":1.2.3,` + metaTail, kind: ErrSyntax, off: -1},
	{name: "malformed number in before-image", in: `{"data":{},"before-image":{"a":1e},"metadata":{"record-type":"data","operation":"update",` + metaTail, kind: ErrSyntax, off: -1},
	{name: "control not an object", in: `{"control":[],"metadata":{"record-type":"control","operation":"drop-table"}}`, kind: ErrBadField, off: -1},
	{name: "table-def not an object", in: `{"control":{"table-def":"x"},"metadata":{"record-type":"control","operation":"create-table"}}`, kind: ErrBadField, off: -1},
	{name: "table-def columns not an object", in: `{"control":{"table-def":{"columns":[]}},"metadata":{"record-type":"control","operation":"create-table"}}`, kind: ErrBadField, off: -1},
	{name: "table-def column not an object", in: `{"control":{"table-def":{"columns":{"a":"INT4"}}},"metadata":{"record-type":"control","operation":"create-table"}}`, kind: ErrBadField, off: -1},
	{name: "table-def length not an integer", in: `{"control":{"table-def":{"columns":{"a":{"type":"WSTRING","length":1.5}}}},"metadata":{"record-type":"control","operation":"create-table"}}`, kind: ErrBadField, off: -1},
	{name: "table-def nullable not a boolean", in: `{"control":{"table-def":{"columns":{"a":{"type":"INT4","nullable":1}}}},"metadata":{"record-type":"control","operation":"create-table"}}`, kind: ErrBadField, off: -1},
	{name: "table-def type not a string", in: `{"control":{"table-def":{"columns":{"a":{"type":4}}}},"metadata":{"record-type":"control","operation":"create-table"}}`, kind: ErrBadField, off: -1},
	{name: "table-def primary-key not strings", in: `{"control":{"table-def":{"primary-key":[1]}},"metadata":{"record-type":"control","operation":"create-table"}}`, kind: ErrBadField, off: -1},
	// Item 9: string text that is not Unicode is dead-lettered, naming the field (ErrBadString);
	// an escape JSON does not define is a syntax error. Before, fastjson passed invalid UTF-8
	// through, kept a lone surrogate escape as the six characters \ud800, and turned a high
	// surrogate followed by another escape into U+FFFD, swallowing the second character.
	{name: "invalid UTF-8 in a data string", in: `{"data":{"id":1,"name":"ab` + "\xff" + `c"},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrBadString, off: 26, reason: "data.name: invalid UTF-8"},
	{name: "truncated UTF-8 sequence in a data string", in: `{"data":{"name":"` + "\xe2\x82" + `"},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrBadString, off: 17, reason: "data.name: invalid UTF-8"},
	{name: "UTF-8 encoded surrogate (CESU) in a data string", in: `{"data":{"name":"` + "\xed\xa0\x80" + `"},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrBadString, off: 17, reason: "data.name: invalid UTF-8"},
	{name: "invalid UTF-8 in a column name", in: `{"data":{"na` + "\xff" + `me":1},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrBadString, off: 12, reason: `data: invalid UTF-8 in the key "na\xffme"`},
	{name: "invalid UTF-8 in the before-image", in: `{"data":{"id":1},"before-image":{"id":"` + "\xc0" + `"},"metadata":{"record-type":"data","operation":"update",` + metaTail, kind: ErrBadString, off: 39, reason: "before-image.id: invalid UTF-8"},
	{name: "invalid UTF-8 in metadata", in: `{"data":{},"metadata":{"record-type":"data","operation":"insert","schema-name":"s` + "\xff" + `","table-name":"t"}}`, kind: ErrBadString, off: 81, reason: "metadata.schema-name: invalid UTF-8"},
	{name: "invalid UTF-8 inside nested JSON", in: `{"data":{"doc":{"tags":["ok","` + "\xff" + `"]}},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrBadString, off: 30, reason: "data.doc.tags[1]: invalid UTF-8"},
	{name: "lone high surrogate", in: `{"data":{"name":"a\ud800b"},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrBadString, off: 18, reason: `data.name: lone surrogate escape \ud800`},
	{name: "lone high surrogate at the end", in: `{"data":{"name":"\uD83D"},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrBadString, off: 17, reason: `data.name: lone surrogate escape \uD83D`},
	{name: "lone low surrogate", in: `{"data":{"name":"\udc00"},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrBadString, off: 17, reason: `data.name: lone surrogate escape \udc00`},
	{name: "high surrogate followed by a non-surrogate escape", in: `{"data":{"name":"\ud800\u0041"},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrBadString, off: 17, reason: "data.name: lone surrogate"},
	{name: "two high surrogates", in: `{"data":{"name":"\ud800\ud800"},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrBadString, off: 17, reason: "data.name: lone surrogate"},
	{name: "lone surrogate in a column name", in: `{"data":{"\ud800":1},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrBadString, off: 10, reason: "data: lone surrogate escape \\ud800 (a high surrogate not followed by a low one) in the key"},
	{name: "lone surrogate in a table-def", in: `{"control":{"table-def":{"columns":{"a":{"type":"\udfff"}}}},"metadata":{"record-type":"control","operation":"create-table"}}`, kind: ErrBadString, off: 49, reason: "control.table-def.columns.a.type: lone surrogate"},
	{name: "undefined escape", in: `{"data":{"name":"a\qb"},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: 18, reason: `data.name: invalid escape \q`},
	{name: "short unicode escape", in: `{"data":{"name":"\u12"},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: 17, reason: `data.name: invalid escape \u12"`},
	// Item 9: NaN and infinities are not JSON numbers. Every bare spelling is a syntax error
	// naming the column (before, fastjson's NaN/nan/inf/-inf/+inf passed as numbers while
	// Infinity and -Infinity were syntax errors without a column); quoted, they are strings,
	// which float and double columns convert (see Convert).
	{name: "bare NaN", in: `{"data":{"x":NaN},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: -2, reason: "data.x: bare NaN/Infinity is not a JSON number"},
	{name: "bare nan", in: `{"data":{"x":nan},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: -2, reason: "data.x: bare NaN/Infinity is not a JSON number"},
	{name: "bare -nan", in: `{"data":{"x":-nan},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: -2, reason: "data.x: bare NaN/Infinity is not a JSON number"},
	{name: "bare inf", in: `{"data":{"x":inf},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: -2, reason: "data.x: bare NaN/Infinity is not a JSON number"},
	{name: "bare -Inf", in: `{"data":{"x":-Inf},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: -2, reason: "data.x: bare NaN/Infinity is not a JSON number"},
	{name: "bare +inf", in: `{"data":{"x":+inf},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: -2, reason: "data.x: bare NaN/Infinity is not a JSON number"},
	{name: "bare Infinity", in: `{"data":{"x":Infinity},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: 13, reason: "data.x: bare NaN/Infinity is not a JSON number"},
	{name: "bare -Infinity", in: `{"data":{"id":1,"x":-Infinity},"metadata":{"record-type":"data","operation":"insert",` + metaTail, kind: ErrSyntax, off: 20, reason: "data.x: bare NaN/Infinity is not a JSON number"},
	{name: "bare NaN in the before-image", in: `{"data":{"x":1},"before-image":{"x":NaN},"metadata":{"record-type":"data","operation":"update",` + metaTail, kind: ErrSyntax, off: -2, reason: "before-image.x: bare NaN/Infinity is not a JSON number"},
	{name: "bare inf in metadata", in: `{"data":{},"metadata":{"record-type":"data","operation":"insert","transaction-id":inf,` + metaTail, kind: ErrSyntax, off: -2, reason: "metadata.transaction-id: bare NaN/Infinity is not a JSON number"},
	{name: "table-def primary-key object", in: `{"control":{"table-def":{"primary-key":{}}},"metadata":{"record-type":"control","operation":"create-table"}}`, kind: ErrBadField, off: -1},
}

func cfgOf(c decodeCase) Config {
	if c.cfg != nil {
		return *c.cfg
	}
	return DefaultConfig()
}

func TestDecodeGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(cfgOf(tc))
			var ev change.Event
			err := d.Decode([]byte(tc.in), &ev)
			if tc.kind != 0 {
				var de *DecodeError
				if !errors.As(err, &de) {
					t.Fatalf("got err %v, want *DecodeError of kind %s", err, tc.kind)
				}
				if de.Kind != tc.kind {
					t.Fatalf("got kind %s (%v), want %s", de.Kind, err, tc.kind)
				}
				if !errors.Is(err, tc.kind) {
					t.Fatalf("errors.Is(err, %s) is false", tc.kind)
				}
				if tc.off != -2 && de.Offset != tc.off {
					t.Errorf("offset %d, want %d (%v)", de.Offset, tc.off, err)
				}
				if de.Reason == "" {
					t.Errorf("empty reason")
				}
				if !strings.Contains(de.Reason, tc.reason) {
					t.Errorf("reason %q, want it to contain %q", de.Reason, tc.reason)
				}
				if !utf8.ValidString(de.Reason) {
					t.Errorf("reason %q is not valid UTF-8 (it is stored in a string column)", de.Reason)
				}
				if ev.Op != change.OpUnknown || ev.Columns != nil || ev.Before != nil || ev.Control != nil {
					t.Errorf("event not cleared on error: %+v", ev)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got := dumpEvent(&ev); got != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
			if ev.Pos != (change.Position{}) || ev.Raw != nil || ev.Ack != nil {
				t.Errorf("Decode touched Pos/Raw/Ack")
			}
		})
	}
}

// TestDecodeFormatting decodes every valid golden input in compact and in indented form: the
// result must not depend on whitespace or a trailing newline.
func TestDecodeFormatting(t *testing.T) {
	t.Parallel()
	for _, tc := range decodeCases {
		if tc.kind != 0 || !json.Valid([]byte(tc.in)) {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			var compact, pretty bytes.Buffer
			if err := json.Compact(&compact, []byte(tc.in)); err != nil {
				t.Fatal(err)
			}
			if err := json.Indent(&pretty, []byte(tc.in), "", "    "); err != nil {
				t.Fatal(err)
			}
			for _, in := range []string{compact.String(), compact.String() + "\n", pretty.String() + "\r\n", "\n  " + pretty.String()} {
				d := NewDecoder(cfgOf(tc))
				var ev change.Event
				if err := d.Decode([]byte(in), &ev); err != nil {
					t.Fatalf("Decode(%q): %v", in, err)
				}
				if got := dumpEvent(&ev); got != tc.want {
					t.Errorf("input %q\ngot:\n%s\nwant:\n%s", in, got, tc.want)
				}
			}
		})
	}
}

// TestDecodeNoAliasing checks that an event's strings survive the decoder being reused and
// the input buffer being overwritten.
func TestDecodeNoAliasing(t *testing.T) {
	t.Parallel()
	d := NewDecoder(biCfg)
	var evs []*change.Event
	var wants []string
	buf := make([]byte, 0, 4096)
	for _, tc := range decodeCases {
		if tc.kind != 0 || (tc.cfg != nil && *tc.cfg != biCfg) {
			continue
		}
		buf = append(buf[:0], tc.in...)
		ev := &change.Event{}
		if err := d.Decode(buf, ev); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i := range buf {
			buf[i] = 'X'
		}
		evs = append(evs, ev)
		wants = append(wants, dumpEvent(ev))
	}
	if len(evs) < 10 {
		t.Fatalf("only %d events", len(evs))
	}
	// Decode more records with the same decoder, then compare.
	for _, tc := range decodeCases {
		var ev change.Event
		_ = d.Decode([]byte(tc.in), &ev)
	}
	for i, ev := range evs {
		if got := dumpEvent(ev); got != wants[i] {
			t.Errorf("event %d changed after decoder reuse:\n%s\nwas:\n%s", i, got, wants[i])
		}
	}
}

// TestDecodeReuseEvent decodes into the same Event repeatedly: Columns capacity is reused and
// nothing of the previous record leaks into the next.
func TestDecodeReuseEvent(t *testing.T) {
	t.Parallel()
	decoders := map[Config]*Decoder{}
	var ev change.Event
	for round := 0; round < 3; round++ {
		for _, tc := range decodeCases {
			d := decoders[cfgOf(tc)]
			if d == nil {
				d = NewDecoder(cfgOf(tc))
				decoders[cfgOf(tc)] = d
			}
			err := d.Decode([]byte(tc.in), &ev)
			if tc.kind != 0 {
				if err == nil {
					t.Fatalf("%s: want error", tc.name)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got := dumpEvent(&ev); got != tc.want {
				t.Errorf("%s: reused event\ngot:\n%s\nwant:\n%s", tc.name, got, tc.want)
			}
		}
	}
}

func TestDecodeBigRecordGrowsArena(t *testing.T) {
	t.Parallel()
	// Nested values whose compact form is produced by fastjson; make sure many columns and
	// long strings work and the arena growth path is exercised via escapes of keys in JSON.
	var b strings.Builder
	b.WriteString(`{"metadata":{"record-type":"data","operation":"load","schema-name":"s","table-name":"t"},"data":{`)
	for i := 0; i < 500; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"c%d":{"k\u0041%d":["\u00e9",%d]}`, i, i, i)
	}
	b.WriteString(`}}`)
	d := NewDecoder(DefaultConfig())
	var ev change.Event
	if err := d.Decode([]byte(b.String()), &ev); err != nil {
		t.Fatal(err)
	}
	if len(ev.Columns) != 500 {
		t.Fatalf("%d columns", len(ev.Columns))
	}
	if got, want := ev.Columns[499].Value.Text, `{"k\u0041499":["\u00e9",499]}`; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
	if !json.Valid([]byte(ev.Columns[7].Value.Text)) {
		t.Fatalf("invalid JSON %s", ev.Columns[7].Value.Text)
	}
}

func TestIsTruncate(t *testing.T) {
	t.Parallel()
	for op, want := range map[string]bool{"truncate": true, "TRUNCATE": true, "truncate-table": true, "TruncateTable": true,
		"drop-table": false, "truncated": false, "": false, "delete": false} {
		if got := IsTruncate(op); got != want {
			t.Errorf("IsTruncate(%q) = %t, want %t", op, got, want)
		}
	}
}

func TestErrorKindStrings(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for k := ErrSyntax; k <= ErrBadString; k++ {
		s := k.String()
		if seen[s] || strings.HasPrefix(s, "kind(") {
			t.Errorf("kind %d: bad or duplicate name %q", k, s)
		}
		seen[s] = true
	}
	err := error(&DecodeError{Offset: 3, Reason: "r", Kind: ErrSyntax})
	if got := err.Error(); got != "dms: decode: syntax: r (at byte 3)" {
		t.Errorf("Error() = %q", got)
	}
	if errors.Is(err, ErrBadField) {
		t.Error("Is matched the wrong kind")
	}
}
