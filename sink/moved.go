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
	// own are the files this writer wrote, with their moves: read from memory, not storage.
	own map[string][]move
}

func newMovedKeys() *movedKeys {
	return &movedKeys{marks: make(map[string]moveMark), own: make(map[string][]move)}
}

// empty reports whether no moved key is remembered.
func (m *movedKeys) empty() bool { return m == nil || len(m.marks) == 0 }

// overtakes reports whether a newer key change moved key away than the change r: r is a load
// row (older than any change of its key), or older by source position, or, where the positions
// cannot tell, it arrived strictly earlier.
func (m *movedKeys) overtakes(key []byte, r *row) bool {
	if m.empty() {
		return false
	}
	mk, ok := m.marks[string(key)]
	if !ok || r.replay {
		return false
	}
	if r.src.load {
		return true
	}
	if c := r.src.Compare(&mk.pos); c != 0 {
		return c < 0
	}
	return r.at < mk.at
}

// note remembers mv, committed at when.
func (m *movedKeys) note(mv move, when time.Time) {
	cur, ok := m.marks[mv.key]
	if ok && !newerMove(mv, cur) {
		return
	}
	m.marks[mv.key] = moveMark{at: mv.at, pos: mv.pos, committed: when}
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
		moves, err := m.movesOf(ctx, tbl, files[i])
		if err != nil {
			return err
		}
		for _, mv := range moves {
			m.note(mv, times[i])
		}
	}
	m.scanned = snap.SnapshotID
	for k, mk := range m.marks {
		if mk.committed.Before(from) {
			delete(m.marks, k)
		}
	}
	return nil
}

// movesOf returns the moves a snapshot's file lists: from memory when this writer wrote it.
func (m *movedKeys) movesOf(ctx context.Context, tbl *table.Table, path string) ([]move, error) {
	if mv, ok := m.own[path]; ok {
		delete(m.own, path)
		return mv, nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	f, err := fs.Open(path)
	if errors.Is(err, iofs.ErrNotExist) {
		return nil, nil // removed with its snapshot's files: older than any change still to come
	}
	if err != nil {
		return nil, fmt.Errorf("read moved keys %s: %w", path, err)
	}
	b, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("read moved keys %s: %w", path, err)
	}
	return decodeMoves(b)
}

// movedFile is the stored form of a commit's moves.
type movedFile struct {
	Moved []movedEntry `json:"moved"`
}

type movedEntry struct {
	Key string    `json:"k"` // base64 of the key's encoding
	At  int64     `json:"at"`
	Pos [4]string `json:"pos"`
}

func encodeMoves(moves []move) ([]byte, error) {
	out := movedFile{Moved: make([]movedEntry, len(moves))}
	for i, mv := range moves {
		out.Moved[i] = movedEntry{Key: base64.RawStdEncoding.EncodeToString([]byte(mv.key)), At: mv.at,
			Pos: [4]string{mv.pos.CommitTS, mv.pos.TxID, mv.pos.TxRecord, mv.pos.Position}}
	}
	return json.Marshal(out)
}

func decodeMoves(b []byte) ([]move, error) {
	var in movedFile
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("decode moved keys: %w", err)
	}
	out := make([]move, 0, len(in.Moved))
	for _, e := range in.Moved {
		k, err := base64.RawStdEncoding.DecodeString(e.Key)
		if err != nil {
			return nil, fmt.Errorf("decode moved key: %w", err)
		}
		out = append(out, move{key: string(k), at: e.At,
			pos: change.SourcePos{CommitTS: e.Pos[0], TxID: e.Pos[1], TxRecord: e.Pos[2], Position: e.Pos[3]}})
	}
	return out, nil
}

// write stores a batch's moves in a file beside the table's data and returns its path, to be
// named in the commit's summary; the writer reads them back from memory.
func (m *movedKeys) write(ctx context.Context, tbl *table.Table, token string, moves []move) (string, error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return "", err
	}
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return "", errors.New("the table's file system cannot write files")
	}
	b, err := encodeMoves(moves)
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
	m.own[name] = moves
	return name, nil
}
