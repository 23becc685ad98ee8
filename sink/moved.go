package sink

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"strings"
	"time"

	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// Moved keys: how a key change committed by one worker overtakes an older change of its old
// key that another worker commits after it (design.md §4).
//
// Under primary-key partitioning a key change travels with its new key, on another shard than
// the old key's earlier changes, and often to another worker. Its commit deletes the old key;
// an older change of that key committed later would bring the row back. Instead of making key
// changes wait for every older change of their table on other workers, each commit that
// carries key changes writes their old keys, with arrival and DMS source position, to a small
// file next to its data (tableprop.SummaryMoved names it in the snapshot summary), and every
// writer reads the files of the snapshots committed since it last looked before it plans a
// commit: a change of a key that a newer key change moved away is not written back.

// movedWindow is how long a moved key is remembered after its snapshot was committed: longer
// than any older change of the key can take to be committed elsewhere (a worker's flush, a
// lease moving after a crash, a source position disorder between DMS threads).
const movedWindow = 30 * time.Minute

// movedScanMax bounds the snapshots read when a writer first looks at a table.
const movedScanMax = 2000

// move is one key change's old key: its encoding (encodeKey), arrival and source position.
type move struct {
	key string
	at  int64
	pos change.SourcePos
}

// moveMark is the newest move of a key: when its snapshot was committed, and its change.
type moveMark struct {
	at        int64
	pos       change.SourcePos
	committed time.Time
}

// movedKeys holds the old keys of the key changes committed to a table in the last
// movedWindow, by any worker, read from the snapshots of main.
type movedKeys struct {
	// scanned is the newest snapshot of main already read (0: none yet).
	scanned int64
	marks   map[string]moveMark
	// recreated are the keys other commits wrote after a pending move of them.
	recreated map[string]moveMark
	// own are the files this writer wrote, with their content: read from memory, not storage.
	own map[string]movedContent
}

// movedContent is what one commit's file lists.
type movedContent struct {
	moved, recreated []move
}

func newMovedKeys() *movedKeys {
	return &movedKeys{marks: make(map[string]moveMark), recreated: make(map[string]moveMark), own: make(map[string]movedContent)}
}

// empty reports whether no moved or re-created key is remembered.
func (m *movedKeys) empty() bool { return m == nil || len(m.marks) == 0 && len(m.recreated) == 0 }

// recreatedAfter reports whether key, which the key change r moves away, was re-created by a
// newer change another commit wrote while r was pending (it did not wait for r): r's commit
// must not delete it. Where the positions cannot tell, the key is kept.
func (m *movedKeys) recreatedAfter(key []byte, r *row) bool {
	mk, ok := m.recreated[string(key)]
	if !ok {
		return false
	}
	if c := mk.pos.Compare(&r.src.SourcePos); c != 0 {
		return c > 0
	}
	return mk.at >= r.at
}

// overtakes reports whether a newer key change moved key away than the change r: r is a load
// row that arrived before it (or with it), or older by source position, or, where the positions
// cannot tell, it arrived earlier, or in the same millisecond without creating the key (an
// update cannot follow the key's move at the source without a re-creation: movedAfter).
func (m *movedKeys) overtakes(key []byte, r *row) bool {
	if m.empty() {
		return false
	}
	mk, ok := m.marks[string(key)]
	if !ok || r.replay {
		return false
	}
	if r.src.load {
		// A full load is sent before the table's changes; a reload's load rows come after its
		// create-table and are newer than what the table had: by arrival.
		return r.at <= mk.at
	}
	if c := r.src.Compare(&mk.pos); c != 0 {
		return c < 0
	}
	return r.at < mk.at || r.at == mk.at && !r.creates()
}

// note remembers mv in marks, committed at when.
func note(marks map[string]moveMark, mv move, when time.Time) {
	cur, ok := marks[mv.key]
	if ok && !newerMove(mv, cur) {
		return
	}
	marks[mv.key] = moveMark{at: mv.at, pos: mv.pos, committed: when}
}

// newerMove reports whether mv is a later change of its key than cur.
func newerMove(mv move, cur moveMark) bool {
	if c := mv.pos.Compare(&cur.pos); c != 0 {
		return c > 0
	}
	return mv.at > cur.at
}

// update reads the moves of main's snapshots committed since the last update (at most
// movedWindow back) and forgets those older than movedWindow.
func (m *movedKeys) update(ctx context.Context, tbl *table.Table, now time.Time) error {
	snap := tbl.CurrentSnapshot()
	if snap == nil || snap.SnapshotID == m.scanned {
		return nil
	}
	from := now.Add(-movedWindow)
	var files []string
	var times []time.Time
	n := 0
	for _, s := range table.AncestorsOf(snap.SnapshotID, tbl.Metadata().SnapshotByID) {
		if s.SnapshotID == m.scanned || n >= movedScanMax || time.UnixMilli(s.TimestampMs).Before(from) {
			break
		}
		n++
		if s.Summary != nil && s.Summary.Properties[tableprop.SummaryMoved] != "" {
			files = append(files, s.Summary.Properties[tableprop.SummaryMoved])
			times = append(times, time.UnixMilli(s.TimestampMs))
		}
	}
	for i := len(files) - 1; i >= 0; i-- { // oldest first
		c, err := m.contentOf(ctx, tbl, files[i])
		if err != nil {
			return err
		}
		for _, mv := range c.moved {
			note(m.marks, mv, times[i])
		}
		for _, mv := range c.recreated {
			note(m.recreated, mv, times[i])
		}
	}
	m.scanned = snap.SnapshotID
	for _, marks := range []map[string]moveMark{m.marks, m.recreated} {
		for k, mk := range marks {
			if mk.committed.Before(from) {
				delete(marks, k)
			}
		}
	}
	return nil
}

// contentOf returns what a snapshot's file lists: from memory when this writer wrote it.
func (m *movedKeys) contentOf(ctx context.Context, tbl *table.Table, path string) (movedContent, error) {
	if c, ok := m.own[path]; ok {
		delete(m.own, path)
		return c, nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return movedContent{}, err
	}
	f, err := fs.Open(path)
	if errors.Is(err, iofs.ErrNotExist) {
		return movedContent{}, nil // removed with its snapshot's files: older than any change still to come
	}
	if err != nil {
		return movedContent{}, fmt.Errorf("read moved keys %s: %w", path, err)
	}
	b, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil {
		return movedContent{}, fmt.Errorf("read moved keys %s: %w", path, err)
	}
	return decodeMoves(b)
}

// movedFile is the stored form of a commit's moves and re-created keys.
type movedFile struct {
	Moved     []movedEntry `json:"moved,omitempty"`
	Recreated []movedEntry `json:"recreated,omitempty"`
}

type movedEntry struct {
	Key string    `json:"k"` // base64 of the key's encoding
	At  int64     `json:"at"`
	Pos [4]string `json:"pos"`
}

func encodeMoves(c movedContent) ([]byte, error) {
	entries := func(moves []move) []movedEntry {
		out := make([]movedEntry, len(moves))
		for i, mv := range moves {
			out[i] = movedEntry{Key: base64.RawStdEncoding.EncodeToString([]byte(mv.key)), At: mv.at,
				Pos: [4]string{mv.pos.CommitTS, mv.pos.TxID, mv.pos.TxRecord, mv.pos.Position}}
		}
		return out
	}
	return json.Marshal(movedFile{Moved: entries(c.moved), Recreated: entries(c.recreated)})
}

func decodeMoves(b []byte) (movedContent, error) {
	var in movedFile
	if err := json.Unmarshal(b, &in); err != nil {
		return movedContent{}, fmt.Errorf("decode moved keys: %w", err)
	}
	moves := func(entries []movedEntry) ([]move, error) {
		out := make([]move, 0, len(entries))
		for _, e := range entries {
			k, err := base64.RawStdEncoding.DecodeString(e.Key)
			if err != nil {
				return nil, fmt.Errorf("decode moved key: %w", err)
			}
			out = append(out, move{key: string(k), at: e.At,
				pos: change.SourcePos{CommitTS: e.Pos[0], TxID: e.Pos[1], TxRecord: e.Pos[2], Position: e.Pos[3]}})
		}
		return out, nil
	}
	var c movedContent
	var err error
	if c.moved, err = moves(in.Moved); err != nil {
		return movedContent{}, err
	}
	c.recreated, err = moves(in.Recreated)
	return c, err
}

// write stores a batch's moves and re-created keys in a file beside the table's data and
// returns its path, to be named in the commit's summary; the writer reads them back from memory.
func (m *movedKeys) write(ctx context.Context, tbl *table.Table, token string, c movedContent) (string, error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return "", err
	}
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return "", errors.New("the table's file system cannot write files")
	}
	b, err := encodeMoves(c)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s/metadata/moved-keys-%s-%d.json", strings.TrimSuffix(tbl.Location(), "/"), token, time.Now().UnixNano())
	w, err := wfs.Create(name)
	if err != nil {
		return "", err
	}
	if _, err := w.Write(b); err != nil {
		_ = w.Close()
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	if len(m.own) >= 64 {
		clear(m.own) // files of attempts that did not land: read from storage if they ever show up
	}
	m.own[name] = c
	return name, nil
}
