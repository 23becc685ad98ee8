package sink

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// FileDeadLetters appends dead letters as JSON lines to a local file and syncs each write before
// returning, so that a record is never acknowledged before its dead letter is durable.
type FileDeadLetters struct {
	mu    sync.Mutex
	f     *os.File
	count int64
}

// deadLetterLine is the on-disk form of one dead letter.
type deadLetterLine struct {
	Time   time.Time `json:"time"`
	Stream string    `json:"stream"`
	Shard  string    `json:"shard"`
	Seq    string    `json:"sequence_number"`
	Table  string    `json:"table,omitempty"`
	Reason string    `json:"reason"`
	// Raw is the record text when it is valid UTF-8, else RawBase64 holds it.
	Raw       string `json:"raw,omitempty"`
	RawBase64 []byte `json:"raw_base64,omitempty"`
}

// OpenFileDeadLetters opens (or creates) the dead-letter file at path.
func OpenFileDeadLetters(path string) (*FileDeadLetters, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create dead-letter directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open dead-letter file: %w", err)
	}
	return &FileDeadLetters{f: f}, nil
}

// DeadLetter implements change.DeadLetterer.
func (d *FileDeadLetters) DeadLetter(_ context.Context, dl change.DeadLetter) error {
	line := deadLetterLine{Time: time.Now().UTC(), Stream: dl.Stream, Shard: dl.Shard, Seq: dl.Seq,
		Table: dl.Table, Reason: dl.Reason}
	if utf8.Valid(dl.Raw) {
		line.Raw = string(dl.Raw)
	} else {
		line.RawBase64 = dl.Raw
	}
	b, err := json.Marshal(line)
	if err != nil {
		return fmt.Errorf("encode dead letter: %w", err)
	}
	b = append(b, '\n')
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.f.Write(b); err != nil {
		return fmt.Errorf("write dead letter: %w", err)
	}
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("sync dead letter: %w", err)
	}
	d.count++
	return nil
}

// Count returns how many dead letters this process wrote.
func (d *FileDeadLetters) Count() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.count
}

// Close closes the file.
func (d *FileDeadLetters) Close() error { return d.f.Close() }
