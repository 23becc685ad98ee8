package maintenance

import (
	"slices"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/sink/deletes"
)

// planFile builds a data or delete file for the planner tests; a position-delete file is
// file-scoped to ref when ref is not empty.
func planFile(t *testing.T, content iceberg.ManifestEntryContent, path string, rows, size int64, ref string) iceberg.DataFile {
	t.Helper()
	b, err := iceberg.NewDataFileBuilder(*iceberg.UnpartitionedSpec, content, path, iceberg.ParquetFile, nil, nil, nil, rows, size)
	if err != nil {
		t.Fatal(err)
	}
	if ref != "" {
		b.LowerBoundValues(map[int][]byte{deletes.PosPathField: []byte(ref)}).UpperBoundValues(map[int][]byte{deletes.PosPathField: []byte(ref)})
	}
	return b.Build()
}

func TestWorthRewritingFollowsTheChanges(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	config := func(mode string) Config {
		return Config{MaxDeleteFiles: 8, RewriteDeletedFraction: 0.3, TargetFileSize: 512 * mib, DeleteMode: mode}
	}
	data := func(path string, size int64) table.FileScanTask {
		return table.FileScanTask{File: planFile(t, iceberg.EntryContentData, path, 1000, size, "")}
	}
	eqDeletes := func(n int) []iceberg.DataFile {
		var out []iceberg.DataFile
		for range n {
			out = append(out, planFile(t, iceberg.EntryContentEqDeletes, "eq", 10, 100, ""))
		}
		return out
	}
	paths := func(ts []table.FileScanTask) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.File.FilePath())
		}
		slices.Sort(out)
		return out
	}
	tiny := func(n int, size int64) []table.FileScanTask {
		var out []table.FileScanTask
		for i := range n {
			out = append(out, data("tiny"+string(rune('a'+i)), size))
		}
		return out
	}

	cases := []struct {
		name     string
		tasks    []table.FileScanTask
		position bool
		want     []string
	}{
		{"a loaded file is not rewritten for a few small CDC files", append(tiny(3, mib), data("big", 20*mib)), true,
			[]string{"tinya", "tinyb", "tinyc"}},
		{"it joins once the small files add up to half its size", append(tiny(2, 5*mib), data("big", 20*mib)), true,
			[]string{"big", "tinya", "tinyb"}},
		{"files of about the same size merge", []table.FileScanTask{data("a", 1000), data("b", 1010), data("c", 990)}, true,
			[]string{"a", "b", "c"}},
		{"one small file alone is left", []table.FileScanTask{data("small", mib), data("big", 20*mib)}, true, nil},
		{"right-sized files are left", append(tiny(2, mib), data("right", 400*mib)), true, []string{"tinya", "tinyb"}},
		{"position mode: outstanding equality deletes are the conversion's, not a rewrite's",
			[]table.FileScanTask{{File: planFile(t, iceberg.EntryContentData, "big", 1000, 20*mib, ""), EqualityDeleteFiles: eqDeletes(9)}}, true, nil},
		{"equality mode: a file an equality delete applies to is rewritten, small files merge into it",
			append(tiny(2, mib), table.FileScanTask{File: planFile(t, iceberg.EntryContentData, "big", 1000, 20*mib, ""), EqualityDeleteFiles: eqDeletes(1)}), false,
			[]string{"big", "tinya", "tinyb"}},
		{"a deleted fraction past the threshold", []table.FileScanTask{
			{File: planFile(t, iceberg.EntryContentData, "big", 1000, 20*mib, ""),
				DeleteFiles: []iceberg.DataFile{planFile(t, iceberg.EntryContentPosDeletes, "pd", 300, 100, "big")}},
			{File: planFile(t, iceberg.EntryContentData, "other", 1000, 50*mib, ""), // over twice the rewrite it could join
				DeleteFiles: []iceberg.DataFile{planFile(t, iceberg.EntryContentPosDeletes, "pd2", 299, 100, "other")}}}, true,
			[]string{"big"}},
		{"a partition-scoped position delete does not count towards the fraction", []table.FileScanTask{
			{File: planFile(t, iceberg.EntryContentData, "big", 1000, 20*mib, ""),
				DeleteFiles: []iceberg.DataFile{planFile(t, iceberg.EntryContentPosDeletes, "pd", 900, 100, "")}}}, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mode := DeleteModeEquality
			if c.position {
				mode = DeleteModePosition
			}
			cfg := (&compactor{maintained: &maintained{cfg: config(mode)}}).config(nil)
			got := worthRewriting(c.tasks, cfg, c.position)
			if !slices.Equal(paths(got), c.want) {
				t.Fatalf("kept %v, want %v", paths(got), c.want)
			}
			// What is kept, the planner takes whole.
			plan, err := cfg.PlanCompaction(got)
			if err != nil {
				t.Fatal(err)
			}
			var planned []table.FileScanTask
			for _, g := range plan.Groups {
				planned = append(planned, g.Tasks...)
			}
			if !slices.Equal(paths(planned), c.want) {
				t.Fatalf("planned %v, want %v", paths(planned), c.want)
			}
		})
	}
}
