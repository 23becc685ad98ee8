package deletes

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
	"github.com/google/uuid"
)

// ErrSuperseded is returned when a plan (or a compaction's carried vectors, Carry) no longer
// holds on the head it is to be committed on: files it read were rewritten since.
var ErrSuperseded = errors.New("superseded by another compaction")

// The checks of a plan against the newest table before each commit of it, and its deletion
// vectors merged again with those a writer replaced since. A conversion commits a plan in two
// commits: commit 1 adds its position deletes (and removes the vectors they replace), commit 2
// drops the equality deletes it converted.

// Check verifies the plan against head before a commit is staged on it: every equality delete
// and every probed data file still live, and no live data file the plan did not see below the
// plan's highest equality-delete sequence number (a concurrent compaction's rewrite). It returns
// ErrSuperseded otherwise. It returns the paths of head's live files.
func (p *Plan) Check(ctx context.Context, head *table.Table) (map[string]bool, map[string]LiveFile, error) {
	snap := head.CurrentSnapshot()
	if snap == nil {
		return nil, nil, ErrSuperseded
	}
	fs, err := head.FS(ctx)
	if err != nil {
		return nil, nil, err
	}
	data, eqDels, posDels, err := p.manifests.LiveFiles(fs, snap)
	if err != nil {
		return nil, nil, err
	}
	live := make(map[string]bool, len(data)+len(eqDels))
	for _, d := range data {
		live[d.File.FilePath()] = true
		if d.Seq < p.maxSeq && !p.seen[d.File.FilePath()] {
			return nil, nil, ErrSuperseded
		}
	}
	for _, e := range append(eqDels, posDels...) {
		live[e.File.FilePath()] = true
	}
	for path := range p.Probed {
		if !live[path] {
			return nil, nil, ErrSuperseded
		}
	}
	for _, e := range p.EqDels {
		if !live[e.File.FilePath()] {
			return nil, nil, ErrSuperseded
		}
	}
	for _, df := range p.Replaced {
		if !live[df.FilePath()] {
			return nil, nil, ErrSuperseded
		}
	}
	var changed map[string]LiveFile
	if p.DVs {
		// A probed data file whose deletion vector is not the one the plan merged (a writer's
		// vectors, VectorsOfFiles, replaced it since): commit 1 merges the newer one instead, since
		// replacing it with the plan's would bring its positions back.
		now := liveDVs(posDels)
		for path, want := range p.dvOf {
			got := ""
			e, ok := now[path]
			if ok {
				got = dvKey(e.File)
			}
			if got == want || got != "" && p.ours(e.File) { // unchanged, or commit 1 landed
				continue
			}
			if !ok {
				return nil, nil, ErrSuperseded // a vector cannot disappear but by a rewrite of its file
			}
			if changed == nil {
				changed = map[string]LiveFile{}
			}
			changed[path] = e
		}
	}
	return live, changed, nil
}

// ours reports whether df is one of the deletion vectors the plan writes (commit 1 landed).
func (p *Plan) ours(df iceberg.DataFile) bool {
	return p.LandedIn(map[string]bool{df.FilePath(): true})
}

// LandedIn reports whether live (paths) holds the deletion vectors or position deletes of one
// of commit 1's attempts.
func (p *Plan) LandedIn(live map[string]bool) bool {
	if len(p.PosDels) > 0 && live[p.PosDels[0].FilePath()] {
		return true
	}
	for _, df := range p.Remerged {
		if live[df.FilePath()] {
			return true
		}
	}
	return false
}

// Remerge rewrites the plan's deletion vectors for commit 1 on a head where some probed data
// files' vectors changed since the plan (changed, by data file): each of those holds the union
// of the plan's positions and the head's vector, and replaces the head's. It returns the files
// to add and the vectors to remove; the plan's own files stay as they are, for the positional
// branch, which shows the plan's snapshot.
func (p *Plan) Remerge(ctx context.Context, meta table.Metadata, changed map[string]LiveFile) (add, remove []iceberg.DataFile, err error) {
	wfs, ok := p.FS.(icebergio.WriteFileIO)
	if !ok {
		return nil, nil, errors.New("the table's file IO cannot write")
	}
	location, err := deleteLocationOf(meta)
	if err != nil {
		return nil, nil, err
	}
	dvw := dv.NewDVWriter(wfs, func(id int32) *iceberg.PartitionSpec { return meta.PartitionSpecByID(int(id)) })
	for _, df := range p.PosDels {
		ref := df.ReferencedDataFile()
		if ref == nil {
			return nil, nil, fmt.Errorf("deletion vector %s names no data file", df.FilePath())
		}
		bm, err := dv.ReadDV(p.FS, df)
		if err != nil {
			return nil, nil, fmt.Errorf("read deletion vector of %s: %w", *ref, err)
		}
		if e, ok := changed[*ref]; ok {
			now, err := dv.ReadDV(p.FS, e.File)
			if err != nil {
				return nil, nil, fmt.Errorf("read deletion vector of %s: %w", *ref, err)
			}
			bm.Or(now)
			remove = append(remove, e.File)
		} else if old, ok := p.replacedOf[*ref]; ok {
			remove = append(remove, old)
		}
		dvw.Load(*ref, bm, df.SpecID(), df.Partition())
	}
	add, err = dvw.Flush(ctx, fmt.Sprintf("%s/%s-dv.puffin", location, uuid.NewString()))
	if err != nil {
		return nil, nil, fmt.Errorf("write deletion vectors: %w", err)
	}
	return add, remove, nil
}
