package deletes

import (
	"sync"

	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// ManifestCache keeps the live entries of the manifests a Planner's plans read, by
// manifest path. A manifest file never changes once written, and its entries' inherited sequence
// numbers are fixed when it is first committed, so its live entries can be reused by every later
// listing of a snapshot that holds it. A conversion lists its snapshot's files once to plan and
// again on the newest table before each of its two commits (check), which runs on the writer's
// goroutine when the commit is handed off; profiled on the 1M-row dv benchmark, re-reading the
// manifests was 3.0 s of the conversions' CPU (docs/benchmarks.md). Under steady commits most
// manifests of the newest table are those of the last listing.
//
// It holds the manifests of the last two listings only (the plan's snapshot and the head it is
// checked on), so it is bounded by the table's live manifests.
type ManifestCache struct {
	mu      sync.Mutex
	entries map[string]manifestFiles
	prev    map[string]bool // the manifests of the listing before the last
}

// manifestFiles are one manifest's live files by kind.
type manifestFiles struct{ data, eqDels, posDels []LiveFile }

// LiveFiles is LiveFilesAll through the cache (c may be nil: no cache). Its zero value is
// ready to use.
func (c *ManifestCache) LiveFiles(fs icebergio.IO, snap *table.Snapshot) (data, eqDels, posDels []LiveFile, err error) {
	if c == nil {
		return LiveFilesAll(fs, snap)
	}
	mans, err := snap.Manifests(fs)
	if err != nil {
		return nil, nil, nil, err
	}
	cur := make(map[string]bool, len(mans))
	for _, mf := range mans {
		path := mf.FilePath()
		cur[path] = true
		c.mu.Lock()
		got, ok := c.entries[path]
		c.mu.Unlock()
		if !ok {
			if got, err = manifestLiveFiles(fs, mf); err != nil {
				return nil, nil, nil, err
			}
			c.mu.Lock()
			if c.entries == nil {
				c.entries = map[string]manifestFiles{}
			}
			c.entries[path] = got
			c.mu.Unlock()
		}
		data = append(data, got.data...)
		eqDels = append(eqDels, got.eqDels...)
		posDels = append(posDels, got.posDels...)
	}
	c.mu.Lock()
	for path := range c.entries {
		if !cur[path] && !c.prev[path] {
			delete(c.entries, path)
		}
	}
	c.prev = cur
	c.mu.Unlock()
	return data, eqDels, posDels, nil
}

// Cached lists the paths of the manifests whose live entries c holds.
func (c *ManifestCache) Cached() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.entries))
	for path := range c.entries {
		out = append(out, path)
	}
	return out
}
