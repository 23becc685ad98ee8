package deletes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
	"github.com/google/uuid"
)

// A delete plan (design.md §10.1): the deleted keys, read from equality-delete files or given in
// memory, are probed in the key column of every live data file they can apply to, and the
// positions found are written as position deletes (deletion vectors on a format v3 table),
// merged with the live ones of each data file. Nothing is committed: the caller commits the plan
// (a conversion's two commits, a writer's batch).

// Planner plans deletes on the tables of one writer and maintainer. It owns the manifest cache
// its plans list snapshots through and uses the process's key cache (nil: every probe reads the
// file). Its plans may run on the writer's goroutine and the maintainer's at once: both caches
// are locked.
type Planner struct {
	keys      *KeyCache
	manifests ManifestCache
}

// NewPlanner returns a planner probing through keys (nil: no cache).
func NewPlanner(keys *KeyCache) *Planner { return &Planner{keys: keys} }

// UseKeyCache makes the planner probe through c (nil: read every file). Call it before planning.
func (pl *Planner) UseKeyCache(c *KeyCache) { pl.keys = c }

// KeyCache is the cache the planner probes through (nil: none).
func (pl *Planner) KeyCache() *KeyCache { return pl.keys }

// Manifests is the planner's manifest cache, for listings of the same table's snapshots.
func (pl *Planner) Manifests() *ManifestCache { return &pl.manifests }

// Plan is what one delete plan adds and drops.
type Plan struct {
	Snap   *table.Snapshot // the snapshot planned on
	FS     icebergio.IO
	EqDels []LiveFile      // the equality deletes planned (none for keys given in memory)
	Probed map[string]bool // the data files whose key column was read
	maxSeq int64           // the sequence number the deletes apply below
	seen   map[string]bool // every live data file of Snap
	// PosDels are the position-delete files written and Rows the positions in them.
	PosDels []iceberg.DataFile
	Rows    int64
	// Replaced are the live position-delete files of the probed data files whose positions the
	// new files also hold (one file per data file); a conversion's second commit drops them.
	Replaced []iceberg.DataFile
	// On a format v3 table (DVs) PosDels are deletion vectors, one per data file in one Puffin
	// file. ReplacedDVs are the live deletion vectors they supersede (the commit that adds them
	// removes these: the spec allows one live deletion vector per data file), and dvOf is the
	// live deletion vector of every probed data file the plan saw ("" for none), which Check
	// compares with the head.
	DVs         bool
	ReplacedDVs []iceberg.DataFile
	replacedOf  map[string]iceberg.DataFile // ReplacedDVs by the data file they reference
	dvOf        map[string]string
	// Remerged are the deletion vectors a commit wrote instead of PosDels, on a head where a
	// writer had replaced some of the probed files' vectors since the plan (Remerge).
	Remerged  []iceberg.DataFile
	manifests *ManifestCache // the planner's, for Check
}

// Plan probes data, the live data files of src's snapshot snap, for the keys of eqDels and
// writes the position deletes (or deletion vectors) they make, merged with the live ones of
// posDels (nothing is committed). eqDels are the snapshot's own equality deletes for a
// conversion, or a writer's not yet committed ones (VectorsOfFiles).
func (pl *Planner) Plan(ctx context.Context, src *table.Table, snap *table.Snapshot, fs icebergio.IO,
	data, eqDels, posDels []LiveFile) (*Plan, error) {
	p, w, err := pl.start(src, snap, fs, posDels)
	if err != nil {
		return nil, err
	}
	sort.Slice(eqDels, func(i, j int) bool { return eqDels[i].Seq < eqDels[j].Seq })
	p.EqDels = eqDels
	dk, err := readDeletes(ctx, fs, src, eqDels)
	if err != nil {
		return nil, err
	}
	p.maxSeq = dk.maxSeq
	if err := pl.probeAll(ctx, p, w, data, dk); err != nil {
		return nil, err
	}
	return p, nil
}

// planWriter writes a plan's position deletes: deletion vectors on a format v3 table, else one
// Parquet position-delete file per data file.
type planWriter struct {
	meta     table.Metadata
	location string
	posDels  []LiveFile            // the live position deletes of the plan's snapshot
	ownPos   map[string][]LiveFile // those of one data file only, by data file
	dvw      *dv.DVWriter          // format v3
	dvOf     map[string]LiveFile   // the live deletion vectors by data file (format v3)
}

// start begins a plan on src's snapshot snap, whose live position deletes are posDels.
func (pl *Planner) start(src *table.Table, snap *table.Snapshot, fs icebergio.IO, posDels []LiveFile) (*Plan, *planWriter, error) {
	p := &Plan{Snap: snap, FS: fs, seen: map[string]bool{}, Probed: map[string]bool{}, manifests: &pl.manifests}
	meta := src.Metadata()
	w := &planWriter{meta: meta, posDels: posDels, ownPos: fileScoped(posDels)}
	if meta.Version() >= 3 {
		// Format v3: deletion vectors, the only position deletes the spec lets a v3 writer add.
		wfs, ok := fs.(icebergio.WriteFileIO)
		if !ok {
			return nil, nil, errors.New("the table's file IO cannot write")
		}
		w.dvw = dv.NewDVWriter(wfs, func(id int32) *iceberg.PartitionSpec { return meta.PartitionSpecByID(int(id)) })
		w.dvOf = liveDVs(posDels)
		p.DVs, p.dvOf, p.replacedOf = true, map[string]string{}, map[string]iceberg.DataFile{}
	}
	return p, w, nil
}

// deletedKeys are the keys a plan deletes: in every data file (global) or in one partition's
// (scopes, by scopeKey), each with the highest sequence number of a delete holding it. A key of
// one int or long column is kept as an integer, every other key encoded (keyenc.go).
type deletedKeys struct {
	schema  *iceberg.Schema
	keyIDs  []int
	keyType iceberg.Type   // of a single key column (nil for more)
	types   []iceberg.Type // of the key columns (nil when one is not in the schema)
	ints    bool           // the key is one int or long column
	maxSeq  int64          // the highest sequence number of a delete
	global  *keyScope
	scopes  map[string]*keyScope
	wants   map[*keyScope][]int64  // the sorted keys a cached probe looks up, by scope
	encs    map[*keyScope][]string // the same for encoded keys
}

func newDeletedKeys(schema *iceberg.Schema, keyIDs []int) *deletedKeys {
	dk := &deletedKeys{schema: schema, keyIDs: keyIDs, global: newKeyScope(), scopes: map[string]*keyScope{},
		wants: map[*keyScope][]int64{}, encs: map[*keyScope][]string{}}
	if len(keyIDs) == 1 {
		if f, ok := schema.FindFieldByID(keyIDs[0]); ok {
			dk.keyType = f.Type
		}
	}
	dk.types, _ = keyTypes(schema, keyIDs)
	dk.ints = intKey(keyIDs, dk.keyType)
	return dk
}

// scope is the scope of deletes of spec specID and partition part: the global one for an
// unpartitioned spec.
func (dk *deletedKeys) scope(meta table.Metadata, specID int32, part map[int]any) *keyScope {
	spec := meta.PartitionSpecByID(int(specID))
	if spec == nil || spec.IsUnpartitioned() {
		return dk.global
	}
	k := scopeOf(specID, part)
	sc := dk.scopes[k]
	if sc == nil {
		sc = newKeyScope()
		dk.scopes[k] = sc
	}
	return sc
}

// index prepares every scope for probing (keyScope.index).
func (dk *deletedKeys) index() {
	dk.global.index(dk.keyType)
	for _, sc := range dk.scopes {
		sc.index(dk.keyType)
	}
}

// readDeletes reads the keys of src's equality deletes eqDels (sorted by sequence number).
func readDeletes(ctx context.Context, fs icebergio.IO, src *table.Table, eqDels []LiveFile) (*deletedKeys, error) {
	meta := src.Metadata()
	dk := newDeletedKeys(src.Schema(), eqDels[0].File.EqualityFieldIDs())
	for _, e := range eqDels {
		dk.maxSeq = max(dk.maxSeq, e.Seq)
		if !slices.Equal(e.File.EqualityFieldIDs(), dk.keyIDs) {
			return nil, fmt.Errorf("equality deletes with different key columns (%v, %v): compact the table first", dk.keyIDs, e.File.EqualityFieldIDs())
		}
		sc := dk.scope(meta, e.File.SpecID(), e.File.Partition())
		var err error
		if dk.ints {
			err = probeInts(ctx, fs, e.File.FilePath(), dk.keyIDs[0], func(key, _ int64) {
				if sc.intSeq[key] < e.Seq {
					sc.intSeq[key] = e.Seq
				}
			})
		} else if _, err = checkEncodable(dk.schema, dk.keyIDs); err == nil {
			err = readEncoded(ctx, fs, e.File.FilePath(), dk.types, dk.keyIDs, func(key []byte, _ int64) {
				if sc.seq[string(key)] < e.Seq {
					sc.seq[string(key)] = e.Seq
				}
			})
		}
		if err != nil {
			return nil, fmt.Errorf("read equality deletes %s: %w", e.File.FilePath(), err)
		}
	}
	dk.index()
	return dk, nil
}

// probeAll probes every data file of data that the deletes of dk can apply to and writes the
// positions found into p.
func (pl *Planner) probeAll(ctx context.Context, p *Plan, w *planWriter, data []LiveFile, dk *deletedKeys) error {
	location, err := deleteLocationOf(w.meta)
	if err != nil {
		return err
	}
	w.location = location
	for _, d := range data {
		path := d.File.FilePath()
		p.seen[path] = true
		if d.Seq >= p.maxSeq {
			continue // no delete of the plan applies to it
		}
		sc := dk.scopes[scopeKey(d.File)]
		if !dk.global.mayHold(d, dk.keyIDs, dk.keyType) && !sc.mayHold(d, dk.keyIDs, dk.keyType) {
			continue
		}
		p.Probed[path] = true
		positions, err := pl.probe(ctx, p.FS, d, dk, sc)
		if err != nil {
			RemoveFiles(p.FS, p.PosDels)
			return fmt.Errorf("probe %s: %w", path, err)
		}
		if len(positions) == 0 {
			continue
		}
		if err := w.add(ctx, p, d, positions); err != nil {
			return err
		}
	}
	return w.flush(ctx, p)
}

// probe returns the positions of data file d whose key is deleted above d's sequence number,
// globally or in d's scope sc (nil: none).
func (pl *Planner) probe(ctx context.Context, fs icebergio.IO, d LiveFile, dk *deletedKeys, sc *keyScope) ([]int64, error) {
	var positions []int64
	path := d.File.FilePath()
	if dk.ints {
		want, ok := dk.wants[sc]
		if !ok {
			want = dk.global.with(sc) // once per scope, not per data file
			dk.wants[sc] = want
		}
		err := pl.keys.ProbeInts(ctx, fs, path, dk.keyIDs[0], d.File.Count(), want, func(key, pos int64) {
			if dk.global.seqOfInt(key) > d.Seq || sc.seqOfInt(key) > d.Seq {
				positions = append(positions, pos)
			}
		})
		return positions, err
	}
	want, ok := dk.encs[sc]
	if !ok {
		want = dk.global.withEncoded(sc)
		dk.encs[sc] = want
	}
	err := pl.keys.ProbeKeys(ctx, fs, path, dk.types, dk.keyIDs, d.File.Count(), want, func(key []byte, pos int64) {
		if s := dk.global.seq[string(key)]; s > d.Seq {
			positions = append(positions, pos)
		} else if sc != nil && sc.seq[string(key)] > d.Seq {
			positions = append(positions, pos)
		}
	})
	return positions, err
}

// add adds data file d's deleted positions to the plan. One position-delete file per data file:
// the new one also holds the positions of the data file's live ones, which a conversion's second
// commit drops. Only files that apply to d (sequence number at or above d's) are merged; a file
// below d's would not apply to it.
func (w *planWriter) add(ctx context.Context, p *Plan, d LiveFile, positions []int64) error {
	var replaced []iceberg.DataFile
	for _, old := range w.ownPos[d.File.FilePath()] {
		if old.Seq < d.Seq {
			continue
		}
		err := readPositions(ctx, p.FS, old.File.FilePath(), d.File.FilePath(), func(pos int64) { positions = append(positions, pos) })
		if err != nil {
			RemoveFiles(p.FS, p.PosDels)
			return fmt.Errorf("read position deletes %s: %w", old.File.FilePath(), err)
		}
		replaced = append(replaced, old.File)
	}
	if w.dvw != nil {
		if err := p.addDV(ctx, w.dvw, d, positions, w.dvOf, w.posDels); err != nil {
			return err
		}
		p.Replaced = append(p.Replaced, replaced...)
		return nil
	}
	df, err := writePositionDeletes(p.FS, w.meta, w.location, d.File, positions)
	if err != nil {
		RemoveFiles(p.FS, p.PosDels)
		return fmt.Errorf("write position deletes for %s: %w", d.File.FilePath(), err)
	}
	p.PosDels = append(p.PosDels, df)
	p.Replaced = append(p.Replaced, replaced...)
	p.Rows += df.Count()
	return nil
}

// flush writes the plan's deletion vectors (format v3) into one Puffin file.
func (w *planWriter) flush(ctx context.Context, p *Plan) error {
	if w.dvw == nil {
		return nil
	}
	files, err := w.dvw.Flush(ctx, fmt.Sprintf("%s/%s-dv.puffin", w.location, uuid.NewString()))
	if err != nil {
		return fmt.Errorf("write deletion vectors: %w", err)
	}
	p.PosDels = files
	for _, df := range files {
		p.Rows += df.Count()
	}
	return nil
}

// addDV adds data file d's deleted positions to the plan's deletion vectors. A data file's
// deletion vector holds every position deleted in it (readers ignore its Parquet position
// deletes once it has one): those of its live deletion vector, which the commit that adds it replaces, and
// those of the Parquet position-delete files that apply to it (file-scoped ones are already in
// positions; partition-scoped ones, which a v2 writer may have left, are read here and stay for
// their other data files).
func (p *Plan) addDV(ctx context.Context, dvw *dv.DVWriter, d LiveFile, positions []int64, dvOf map[string]LiveFile, posDels []LiveFile) error {
	path := d.File.FilePath()
	p.dvOf[path] = ""
	if old, ok := dvOf[path]; ok {
		bm, err := dv.ReadDV(p.FS, old.File)
		if err != nil {
			return fmt.Errorf("read deletion vector of %s: %w", path, err)
		}
		dvw.Load(path, bm, d.File.SpecID(), d.File.Partition())
		p.ReplacedDVs = append(p.ReplacedDVs, old.File)
		p.replacedOf[path] = old.File
		p.dvOf[path] = dvKey(old.File)
	}
	for _, pd := range posDels {
		if table.IsDeletionVector(pd.File) || pd.Seq < d.Seq || SameBounds(pd.File) || !mayReference(pd.File, path) {
			continue
		}
		err := readPositions(ctx, p.FS, pd.File.FilePath(), path, func(pos int64) { positions = append(positions, pos) })
		if err != nil {
			return fmt.Errorf("read position deletes %s: %w", pd.File.FilePath(), err)
		}
	}
	return dvw.Add(path, positions, d.File.SpecID(), d.File.Partition())
}
