package maintenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"go.uber.org/zap"
)

// Deferred file deletion (design.md §10, "Snapshots kept cost memory and CPU"). Snapshot expiry
// with max_snapshots can expire snapshots younger than snapshot_retention. Their files (what a
// later compaction or manifest rewrite replaced) may still be read by a query that started on
// such a snapshot, so they are not deleted with the expiry but listed in a file under the
// table's metadata directory, named by the time they may go, and deleted then by a later run
// (step "purge"). A list lost between the expiry commit and its write leaves orphans, which
// orphan cleanup removes after orphan_min_age.

// deferredDir is where the lists live, under the table's location.
const deferredDir = "metadata/deferred-deletes"

// deferredDeletes are a table's lists of files to delete later, and when storage was last listed
// for them. The maintenance goroutine alone uses them.
type deferredDeletes struct {
	*maintained
	lists  []deferredList
	listed time.Time
	clock  func() time.Time // when lists are due (tests move it)
}

// deferredList is one list file: its path and when its files may be deleted.
type deferredList struct {
	path string
	due  time.Time
}

// deferredFile is a list file's content.
type deferredFile struct {
	DeleteAfter time.Time `json:"delete_after"`
	Files       []string  `json:"files"`
}

// recordingIO is the table's IO with Remove recorded instead of done: the expiry's file removal
// runs against it to learn which files it would delete. It hides the bulk delete of the IO it
// wraps, so every removal goes through Remove.
type recordingIO struct {
	icebergio.IO
	mu      sync.Mutex
	removed []string
}

func (r *recordingIO) Remove(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = append(r.removed, name)
	return nil
}

// filesOfExpired returns the files that removing the snapshots ids of pre (leaving post) frees:
// what iceberg-go's post-commit step of the expiry would delete.
func filesOfExpired(ctx context.Context, pre, post *table.Table, ids []int64) ([]string, error) {
	rec := &recordingIO{}
	fsF := func(ctx context.Context) (icebergio.IO, error) {
		fs, err := pre.FS(ctx)
		if err != nil {
			return nil, err
		}
		rec.IO = fs
		return rec, nil
	}
	view := table.New(pre.Identifier(), pre.Metadata(), pre.MetadataLocation(), fsF, nil)
	if err := table.NewRemoveSnapshotsUpdate(ids, true).PostCommit(ctx, view, post); err != nil {
		return nil, err
	}
	slices.Sort(rec.removed)
	return slices.Compact(rec.removed), nil
}

// add writes the list of files to delete after due and remembers it.
func (d *deferredDeletes) add(ctx context.Context, tbl *table.Table, files []string, due time.Time) error {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return errors.New("the table's file system cannot write files")
	}
	b, err := json.Marshal(deferredFile{DeleteAfter: due.UTC(), Files: files})
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s/%s/%d-%d.json", strings.TrimSuffix(tbl.Location(), "/"), deferredDir, due.UnixMilli(), time.Now().UnixNano())
	w, err := wfs.Create(name)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		_ = w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	d.lists = append(d.lists, deferredList{path: name, due: due})
	return nil
}

// list reads the table's pending lists from storage (written by this or another
// process, before a restart or a lease move), at most once per Interval.
func (d *deferredDeletes) list(ctx context.Context, tbl *table.Table, now time.Time) {
	if !d.listed.IsZero() && now.Sub(d.listed) < d.cfg.Interval {
		return
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return
	}
	d.listed = now
	lfs, ok := fs.(icebergio.ListableIO)
	if !ok {
		d.log.Debug("the table's file system cannot list: deferred deletes of earlier processes are left to orphan cleanup")
		return
	}
	root := strings.TrimSuffix(tbl.Location(), "/") + "/" + deferredDir
	var found []deferredList
	err = lfs.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".json") {
			return nil
		}
		ms, _, ok := strings.Cut(path.Base(p), "-")
		if !ok {
			return nil
		}
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			return nil
		}
		found = append(found, deferredList{path: p, due: time.UnixMilli(n)})
		return nil
	})
	if err != nil && !errors.Is(err, iofs.ErrNotExist) {
		d.log.Debug("cannot list deferred deletes", zap.Error(err))
		return
	}
	seen := make(map[string]bool, len(d.lists))
	for _, l := range d.lists {
		seen[l.path] = true
	}
	for _, l := range found {
		if !seen[l.path] {
			d.lists = append(d.lists, l)
		}
	}
}

func (d *deferredDeletes) now() time.Time {
	if d.clock != nil {
		return d.clock()
	}
	return time.Now()
}

// due reports whether a pending list is due.
func (d *deferredDeletes) due(now time.Time) bool {
	for _, l := range d.lists {
		if !now.Before(l.due) {
			return true
		}
	}
	return false
}

// purge deletes the files of the due lists, then the lists. Files already gone count as deleted.
func (d *deferredDeletes) purge(ctx context.Context, rep *Report) error {
	tbl, err := d.cat.LoadTable(ctx, d.ident)
	if err != nil {
		return err
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	now := d.now()
	var errs []error
	kept := d.lists[:0]
	for _, l := range d.lists {
		if now.Before(l.due) {
			kept = append(kept, l)
			continue
		}
		n, err := purgeList(ctx, fs, l.path)
		rep.DeferredFilesRemoved += n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", l.path, err))
			kept = append(kept, l)
		}
	}
	d.lists = kept
	return errors.Join(errs...)
}

// purgeList deletes a list's files and then the list, and returns how many files it deleted.
func purgeList(ctx context.Context, fs icebergio.IO, name string) (int, error) {
	f, err := fs.Open(name)
	if errors.Is(err, iofs.ErrNotExist) {
		return 0, nil // purged by another process
	}
	if err != nil {
		return 0, err
	}
	b, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil {
		return 0, err
	}
	var d deferredFile
	if err := json.Unmarshal(b, &d); err != nil {
		// Not ours or torn: leave its files to orphan cleanup rather than stall on it.
		return 0, fs.Remove(name)
	}
	n := 0
	if bulk, ok := fs.(icebergio.BulkRemovableIO); ok && len(d.Files) > 0 {
		deleted, err := bulk.DeleteFiles(ctx, d.Files)
		n = len(deleted)
		if err != nil && !onlyNotExist(err) {
			return n, err
		}
	} else {
		var errs []error
		for _, p := range d.Files {
			if err := fs.Remove(p); err != nil && !errors.Is(err, iofs.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
			n++
		}
		if err := errors.Join(errs...); err != nil {
			return n, err
		}
	}
	if err := fs.Remove(name); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return n, err
	}
	return n, nil
}
