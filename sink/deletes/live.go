package deletes

import (
	"fmt"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// LiveFile is a live file of a snapshot with its data sequence number.
type LiveFile struct {
	File iceberg.DataFile
	Seq  int64
}

// LiveFilesAll lists a snapshot's live data, equality-delete and position-delete files.
func LiveFilesAll(fs icebergio.IO, snap *table.Snapshot) (data, eqDels, posDels []LiveFile, err error) {
	mans, err := snap.Manifests(fs)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, mf := range mans {
		got, err := manifestLiveFiles(fs, mf)
		if err != nil {
			return nil, nil, nil, err
		}
		data = append(data, got.data...)
		eqDels = append(eqDels, got.eqDels...)
		posDels = append(posDels, got.posDels...)
	}
	return data, eqDels, posDels, nil
}

// manifestLiveFiles reads one manifest's live files by kind.
func manifestLiveFiles(fs icebergio.IO, mf iceberg.ManifestFile) (manifestFiles, error) {
	var out manifestFiles
	for e, err := range mf.Entries(fs, true) {
		if err != nil {
			return manifestFiles{}, err
		}
		df := e.DataFile()
		switch df.ContentType() {
		case iceberg.EntryContentData:
			out.data = append(out.data, LiveFile{df, e.SequenceNum()})
		case iceberg.EntryContentEqDeletes:
			out.eqDels = append(out.eqDels, LiveFile{df, e.SequenceNum()})
		case iceberg.EntryContentPosDeletes:
			out.posDels = append(out.posDels, LiveFile{df, e.SequenceNum()})
		}
	}
	return out, nil
}

// dvKey names one live deletion vector: its Puffin file and the offset of its blob.
func dvKey(df iceberg.DataFile) string {
	if off := df.ContentOffset(); off != nil {
		return fmt.Sprintf("%s@%d", df.FilePath(), *off)
	}
	return df.FilePath()
}

// liveDVs indexes the deletion vectors among posDels by the data file they reference.
func liveDVs(posDels []LiveFile) map[string]LiveFile {
	out := map[string]LiveFile{}
	for _, pd := range posDels {
		if !table.IsDeletionVector(pd.File) {
			continue
		}
		if ref := pd.File.ReferencedDataFile(); ref != nil {
			out[*ref] = pd
		}
	}
	return out
}
