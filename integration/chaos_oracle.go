//go:build integration

package integration

// The chaos run's oracle: the invariants checked all along (the lease observer: a checkpoint never
// moves backwards, SHARD_END is final, no checkpoint passes committed data) and at the end
// (verify against the expected state, no file referenced twice, every shard complete).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/consumer"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/sink"
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

// noteLeases counts lease acquisitions (epoch increments) and moves (owner changes).
// It also checks that a checkpoint never moves backwards and that SHARD_END is final.
func (c *chaosRun) noteLeases(rows map[string]checkpoint.LeaseRow) {
	var bad []string
	c.mu.Lock()
	c.st.workerSamples[min(c.running, 3)]++
	for shard, r := range rows {
		prev := c.seen[shard]
		if r.Epoch > prev.Epoch {
			c.st.acquisitions += int(r.Epoch - prev.Epoch)
			if prev.Owner != "" && r.Owner != prev.Owner {
				c.st.leaseMoves++
			}
		}
		switch {
		case prev.Checkpoint == checkpoint.ShardEnd && r.Checkpoint != checkpoint.ShardEnd:
			bad = append(bad, fmt.Sprintf("shard %s: checkpoint SHARD_END was overwritten with %q (owner %s, epoch %d)", shard, r.Checkpoint, r.Owner, r.Epoch))
		case isSeq(prev.Checkpoint) && isSeq(r.Checkpoint) && change.CompareSeq(r.Checkpoint, prev.Checkpoint) < 0,
			isSeq(prev.Checkpoint) && r.Checkpoint == "":
			bad = append(bad, fmt.Sprintf("shard %s: checkpoint moved backwards from %s to %q (owner %s, epoch %d)", shard, prev.Checkpoint, r.Checkpoint, r.Owner, r.Epoch))
		}
		c.seen[shard] = r
	}
	c.mu.Unlock()
	for _, b := range bad {
		c.violation("%s", b)
	}
}

func isSeq(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// observe samples the lease table and the workers' /metrics every second and checks the committed prefix every
// CheckEvery, until ctx ends.
func (c *chaosRun) observe(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c.scr.scrapeAll()
		rows, err := c.leases(ctx)
		if err != nil {
			continue // the lease table does not exist yet, or the test is ending
		}
		c.noteLeases(rows)
		if time.Since(last) >= c.opt.CheckEvery {
			last = time.Now()
			if err := c.checkCommitted(ctx, "sample"); err != nil && ctx.Err() == nil {
				c.logf("sampled check skipped: %v", err)
			}
		}
	}
}

// streamRecord is what the oracle needs of a record: its sequence number and the table it
// writes ("" for control records and DMS's own tables).
type streamRecord struct {
	seq, table string
	// heartbeat marks a heartbeat record (consumer.heartbeat_interval): no change, and a
	// checkpoint passes it at most once a minute.
	heartbeat bool
}

type shardRecords struct {
	recs   []streamRecord
	closed bool // read to the end of a closed shard
}

// recordCache reads each shard once, incrementally (kinesis-mock is slow).
type recordCache struct {
	kc     *kinesis.Client
	stream string
	mu     sync.Mutex
	shards map[string]*shardRecords
}

// tableOf returns "schema.table" of a DMS data record the sink writes to a table, else "".
func tableOf(data []byte) string {
	var doc struct {
		Metadata struct {
			RecordType string `json:"record-type"`
			Schema     string `json:"schema-name"`
			Table      string `json:"table-name"`
		} `json:"metadata"`
	}
	if json.Unmarshal(data, &doc) != nil || doc.Metadata.RecordType != "data" || doc.Metadata.Schema == "" ||
		strings.HasPrefix(doc.Metadata.Table, "awsdms_") {
		return ""
	}
	return doc.Metadata.Schema + "." + doc.Metadata.Table
}

// upTo reads the shard until the cache holds seq (ShardEnd: the whole closed shard; "": what
// the stream holds now) and returns the cached records.
func (rc *recordCache) upTo(ctx context.Context, shard, seq string) ([]streamRecord, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	sr := rc.shards[shard]
	if sr == nil {
		sr = &shardRecords{}
		rc.shards[shard] = sr
	}
	have := func() bool {
		switch {
		case sr.closed:
			return true
		case seq == checkpoint.ShardEnd || seq == "":
			return false
		default:
			return len(sr.recs) > 0 && change.CompareSeq(sr.recs[len(sr.recs)-1].seq, seq) >= 0
		}
	}
	if have() {
		return sr.recs, nil
	}
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(rc.stream), ShardId: aws.String(shard),
		ShardIteratorType: kintypes.ShardIteratorTypeTrimHorizon}
	if n := len(sr.recs); n > 0 {
		in.ShardIteratorType = kintypes.ShardIteratorTypeAfterSequenceNumber
		in.StartingSequenceNumber = aws.String(sr.recs[n-1].seq)
	}
	it, err := rc.kc.GetShardIterator(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("iterator for %s: %w", shard, err)
	}
	iter := it.ShardIterator
	for iter != nil {
		out, err := rc.kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(10000)})
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", shard, err)
		}
		for _, r := range out.Records {
			sr.recs = append(sr.recs, streamRecord{seq: aws.ToString(r.SequenceNumber), table: tableOf(r.Data),
				heartbeat: consumer.IsHeartbeat(aws.ToString(r.PartitionKey), r.Data)})
		}
		iter = out.NextShardIterator
		if iter == nil {
			sr.closed = true
		}
		if have() || (len(out.Records) == 0 && aws.ToInt64(out.MillisBehindLatest) == 0) {
			break
		}
	}
	if seq != "" && !have() {
		return sr.recs, fmt.Errorf("shard %s: checkpoint %s is beyond the records the stream holds", shard, seq)
	}
	return sr.recs, nil
}

func (rc *recordCache) tables() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	set := map[string]bool{}
	for _, sr := range rc.shards {
		for _, r := range sr.recs {
			if r.table != "" {
				set[r.table] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (c *chaosRun) openCatalog(ctx context.Context) (catalog.Catalog, func(), error) {
	cat, err := sink.OpenCatalog(ctx, c.catCfg)
	if err != nil {
		return nil, nil, err
	}
	return cat, func() {
		if cl, ok := cat.(io.Closer); ok {
			_ = cl.Close()
		}
	}, nil
}

func ident(src string) table.Identifier {
	schema, name, _ := strings.Cut(src, ".")
	return table.Identifier{schema, name}
}

// tableIdent is the identifier of the target table of source table src.
func (c *chaosRun) tableIdent(src string) table.Identifier {
	id := ident(src)
	if c.namespace != "" {
		id[0] = c.namespace
	}
	return id
}

// watermarks loads the per-shard watermarks of every table (a table that does not exist has
// none). A load is retried: metadata files are replaced under a reader.
func (c *chaosRun) watermarks(ctx context.Context, tables []string) (map[string]map[string]string, error) {
	cat, closeCat, err := c.openCatalog(ctx)
	if err != nil {
		return nil, err
	}
	defer closeCat()
	out := map[string]map[string]string{}
	for _, src := range tables {
		var tbl *table.Table
		for attempt := 0; ; attempt++ {
			tbl, err = cat.LoadTable(ctx, c.tableIdent(src))
			if err == nil || errors.Is(err, catalog.ErrNoSuchTable) || errors.Is(err, catalog.ErrNoSuchNamespace) || attempt == 4 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		switch {
		case errors.Is(err, catalog.ErrNoSuchTable) || errors.Is(err, catalog.ErrNoSuchNamespace):
			out[src] = map[string]string{}
		case err != nil:
			return nil, fmt.Errorf("load %s: %w", src, err)
		default:
			out[src] = tableprop.Watermarks(tbl.Properties(), c.stream)
		}
	}
	return out, nil
}

// checkCommitted checks invariant 1: no shard's checkpoint passes committed data. The
// checkpoints are read first and the watermarks last: watermarks only grow, so a checkpoint
// that was correct when written is still covered.
func (c *chaosRun) checkCommitted(ctx context.Context, when string) error {
	rows, err := c.leases(ctx)
	if err != nil {
		return fmt.Errorf("read leases: %w", err)
	}
	cps := map[string]string{}
	for shard, r := range rows {
		switch r.Checkpoint {
		case "", "TRIM_HORIZON", "LATEST", "AT_TIMESTAMP":
		default:
			cps[shard] = r.Checkpoint
		}
	}
	recs := map[string][]streamRecord{}
	for shard, cp := range cps {
		rs, err := c.recs.upTo(ctx, shard, cp)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			c.violation("%s check: %v", when, err)
			continue
		}
		recs[shard] = rs
	}
	wms, err := c.watermarks(ctx, c.recs.tables())
	if err != nil {
		return err
	}
	checked := 0
	shards := make([]string, 0, len(recs))
	for s := range recs {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	for _, shard := range shards {
		cp := cps[shard]
		last := map[string]string{}
		for _, r := range recs[shard] {
			if cp != checkpoint.ShardEnd && change.CompareSeq(r.seq, cp) > 0 {
				break
			}
			checked++
			if r.table != "" {
				last[r.table] = r.seq
			}
		}
		for src, seq := range last {
			if wm := wms[src][shard]; !checkpoint.Covered(wm, seq) {
				c.violation("%s check: shard %s is checkpointed at %s (owner %s, epoch %d) but table %s holds that shard only up to %q; its record %s at or below the checkpoint is not committed",
					when, shard, cp, rows[shard].Owner, rows[shard].Epoch, src, wm, seq)
			}
		}
	}
	c.mu.Lock()
	c.st.checks++
	c.st.records = checked
	c.mu.Unlock()
	return nil
}

// checkFiles checks that no data or delete file is referenced twice by the table's current
// snapshot, that no file was added by two snapshots, and (delete_mode dv) that the current
// snapshot holds at most one deletion vector per data file (the spec's rule; readers refuse a
// second) and none for a data file it no longer holds (a compaction drops a rewritten file's).
// The positional branch (delete_mode position and dv) is checked the same way and must hold no
// equality delete; its snapshots re-add the files of the conversions they mirror, so they are
// left out of the added-twice check.
func (c *chaosRun) checkFiles(ctx context.Context, src string) (int, error) {
	cat, closeCat, err := c.openCatalog(ctx)
	if err != nil {
		return 0, err
	}
	defer closeCat()
	tbl, err := cat.LoadTable(ctx, c.tableIdent(src))
	if err != nil {
		return 0, fmt.Errorf("load %s: %w", src, err)
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return 0, err
	}
	n, _, err := c.checkSnapshotFiles(fs, src, "current snapshot", tbl.CurrentSnapshot())
	if err != nil {
		return 0, err
	}
	vectorCommits := 0
	branch := maintenance.DefaultConfig().PositionalBranch
	if at := tbl.Metadata().SnapshotByName(branch); at != nil {
		_, eq, err := c.checkSnapshotFiles(fs, src, "positional branch", at)
		if err != nil {
			return 0, err
		}
		if eq > 0 {
			c.violation("table %s: the positional branch (snapshot %d) holds %d equality-delete files", src, at.SnapshotID, eq)
		}
		c.mu.Lock()
		c.st.branches++
		c.mu.Unlock()
	}
	defer func() {
		c.mu.Lock()
		c.st.vectorCommits += vectorCommits
		c.mu.Unlock()
	}()
	addedBy := map[string][]int64{}
	readManifests := map[string]bool{}
	for _, snap := range tbl.Metadata().Snapshots() {
		if snap.Summary != nil {
			if _, ok := snap.Summary.Properties[tableprop.SummaryVectors]; ok {
				vectorCommits++
			}
		}
		if maintenance.BranchSource(&snap) != snap.SnapshotID {
			continue // a positional branch's: it adds again what a conversion added on main
		}
		mans, err := snap.Manifests(fs)
		if err != nil {
			return 0, fmt.Errorf("%s: manifests of snapshot %d: %w", src, snap.SnapshotID, err)
		}
		for _, m := range mans {
			if readManifests[m.FilePath()] {
				continue
			}
			readManifests[m.FilePath()] = true
			for e, err := range m.Entries(fs, false) {
				if err != nil {
					return 0, fmt.Errorf("%s: manifest %s: %w", src, m.FilePath(), err)
				}
				if e.Status() == iceberg.EntryStatusADDED {
					p := e.DataFile().FilePath()
					if !slices.Contains(addedBy[p], e.SnapshotID()) {
						addedBy[p] = append(addedBy[p], e.SnapshotID())
					}
				}
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(addedBy)) {
		if len(addedBy[p]) > 1 {
			c.violation("table %s: file %s was added by %d snapshots %v", src, p, len(addedBy[p]), addedBy[p])
		}
	}
	return n, nil
}

// checkSnapshotFiles checks the live files of snap (what names it in violations): no file
// referenced twice, at most one deletion vector per data file and none for a data file snap
// does not hold. It returns the files and deletion vectors checked and the equality-delete files.
func (c *chaosRun) checkSnapshotFiles(fs icebergio.IO, src, what string, snap *table.Snapshot) (files, eqDeletes int, err error) {
	live := map[string]int{}
	data := map[string]bool{}
	vectors := map[string]int{} // data file -> deletion vectors of snap
	if snap == nil {
		return 0, 0, nil
	}
	mans, err := snap.Manifests(fs)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: manifests of the %s: %w", src, what, err)
	}
	for _, m := range mans {
		for e, err := range m.Entries(fs, true) {
			if err != nil {
				return 0, 0, fmt.Errorf("%s: manifest %s: %w", src, m.FilePath(), err)
			}
			df := e.DataFile()
			switch ref := df.ReferencedDataFile(); {
			case df.ContentType() == iceberg.EntryContentData:
				data[df.FilePath()] = true
				live[df.FilePath()]++
			case df.FileFormat() == iceberg.PuffinFile && ref != nil:
				// One Puffin file holds the vectors of several data files, an entry each:
				// checked per data file below, not per file.
				vectors[*ref]++
			default:
				if df.ContentType() == iceberg.EntryContentEqDeletes {
					eqDeletes++
				}
				live[df.FilePath()]++
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(live)) {
		if live[p] > 1 {
			c.violation("table %s: file %s is referenced %d times by the %s", src, p, live[p], what)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(vectors)) {
		if vectors[p] > 1 {
			c.violation("table %s: data file %s has %d deletion vectors in the %s", src, p, vectors[p], what)
		}
		if !data[p] {
			c.violation("table %s: a deletion vector of the %s names data file %s, which it does not hold", src, what, p)
		}
	}
	return len(live) + len(vectors), eqDeletes, nil
}

// complete reports whether every closed shard is at SHARD_END and every open one is
// checkpointed at its last record.
func (c *chaosRun) complete() (bool, string) {
	all, _, err := c.shardList()
	if err != nil {
		return false, err.Error()
	}
	rows, err := c.leases(c.ctx)
	if err != nil {
		return false, err.Error()
	}
	var behind []string
	for _, s := range all {
		id := aws.ToString(s.ShardId)
		cp := rows[id].Checkpoint
		if s.SequenceNumberRange.EndingSequenceNumber != nil {
			if cp != checkpoint.ShardEnd {
				behind = append(behind, fmt.Sprintf("%s (closed) at %q", id, cp))
			}
			continue
		}
		recs, err := c.recs.upTo(c.ctx, id, "")
		if err != nil {
			return false, err.Error()
		}
		// Heartbeats after the last other record need not be checkpointed yet (once a minute).
		for len(recs) > 0 && recs[len(recs)-1].heartbeat {
			recs = recs[:len(recs)-1]
		}
		if len(recs) > 0 && (!isSeq(cp) || change.CompareSeq(cp, recs[len(recs)-1].seq) < 0) {
			behind = append(behind, fmt.Sprintf("%s at %q, last record %s", id, cp, recs[len(recs)-1].seq))
		}
	}
	sort.Strings(behind)
	return len(behind) == 0, strings.Join(behind, "; ")
}

var verifyTableLine = regexp.MustCompile(`(?m)^table (\S+): rows=(\d+) expected=(\d+) (ok|DIFF.*)$`)

func (c *chaosRun) verify() {
	stdout, stderr, err := RunCLI(c.t, c.bin, "verify", "--config", c.verifyConfig, "--expected", c.expected, "--max-diffs", "20")
	out := stdout + stderr
	rows := 0
	for _, m := range verifyTableLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		rows += n
		if m[4] != "ok" {
			c.violation("verify: table %s: %s", m[1], m[4])
		}
	}
	c.mu.Lock()
	c.st.rows = rows
	c.mu.Unlock()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			c.t.Fatalf("verify could not compare: %v\n%s", err, out)
		}
		c.violation("verify found differences:\n%s", out)
		return
	}
	c.logf("verify:\n%s", strings.TrimSpace(out))
}

// checkOrphans applies the orphan oracle (orphans.go) to every table once no worker runs: after
// cleanup no data file may be unreferenced by every snapshot, and verify must still pass.
func (c *chaosRun) checkOrphans() {
	cat, closeCat, err := c.openCatalog(c.ctx)
	if err != nil {
		c.t.Fatalf("orphan oracle: %v", err)
	}
	defer closeCat()
	for _, src := range c.recs.tables() {
		id := c.tableIdent(src)
		before, _, err := unreferencedDataFiles(c.ctx, cat, id, c.s3c)
		if err != nil {
			c.t.Fatalf("orphan oracle: %v", err)
		}
		removed, err := cleanupOrphans(c.ctx, cat, id)
		if err != nil {
			c.t.Fatalf("orphan oracle: %v", err)
		}
		after, _, err := unreferencedDataFiles(c.ctx, cat, id, c.s3c)
		if err != nil {
			c.t.Fatalf("orphan oracle: %v", err)
		}
		c.mu.Lock()
		c.st.orphansBefore += len(before)
		c.st.orphansRemoved += removed
		c.st.orphansAfter += len(after)
		c.mu.Unlock()
		for _, f := range after {
			c.violation("table %s: data file %s is referenced by no snapshot after cleanup", src, f)
		}
	}
	c.mu.Lock()
	rows := c.st.rows
	c.mu.Unlock()
	c.verify() // the cleanup removed no referenced file
	c.mu.Lock()
	c.st.rows = rows // the same rows, checked again
	c.mu.Unlock()
}
