//go:build integration

package integration

// The chaos run's oracle (chaosOracle): the invariants checked all along (sampled by the
// observer, chaos_observer.go: no checkpoint passes committed data) and at the end (every shard
// complete, verify against the expected state, no file referenced twice, no orphan left by
// cleanup, no dead letter), over the stream's records as the record cache (recordCache) holds
// them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
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
	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
	"github.com/dms2iceberg/dms2iceberg/sink/tableprop"
)

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

// chaosOracle checks the tables and the checkpoints; safe for the driver's and the observer's
// goroutines (the ledger and the record cache lock).
type chaosOracle struct {
	t      *testing.T
	ctx    context.Context
	env    *chaosEnv // the catalog it reads, the configuration and expected state verify runs with
	stream *chaosStream
	recs   *recordCache
	led    *chaosLedger
}

func newChaosOracle(t *testing.T, env *chaosEnv, stream *chaosStream, led *chaosLedger) *chaosOracle {
	return &chaosOracle{t: t, ctx: t.Context(), env: env, stream: stream, led: led,
		recs: &recordCache{kc: stream.kc, stream: stream.name, shards: map[string]*shardRecords{}}}
}

// final applies the oracle at the end, once no worker runs: the last checkpoint check, verify,
// the file checks of every table, the orphan oracle and the dead letters.
func (o *chaosOracle) final() {
	t := o.t
	if err := o.checkCommitted(o.ctx, "final"); err != nil {
		t.Fatalf("final checkpoint check: %v", err)
	}
	o.verify()
	for _, src := range o.recs.tables() {
		n, err := o.checkFiles(o.ctx, src)
		if err != nil {
			t.Fatalf("file check: %v", err)
		}
		o.led.with(func(st *chaosStats) { st.files += n })
	}
	o.checkOrphans()
	dead := filepath.Join(o.env.dataDir, "dead-letters.jsonl")
	if b, err := os.ReadFile(dead); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		o.led.violation("the workload has no bad record, but the dead-letter file holds:\n%s", tailFile(dead, 4<<10))
	}
}

// watermarks loads the per-shard watermarks of every table (a table that does not exist has
// none). A load is retried: metadata files are replaced under a reader.
func (o *chaosOracle) watermarks(ctx context.Context, tables []string) (map[string]map[string]string, error) {
	cat, closeCat, err := o.env.openCatalog(ctx)
	if err != nil {
		return nil, err
	}
	defer closeCat()
	out := map[string]map[string]string{}
	for _, src := range tables {
		var tbl *table.Table
		for attempt := 0; ; attempt++ {
			tbl, err = cat.LoadTable(ctx, o.env.tableIdent(src))
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
			out[src] = tableprop.Watermarks(tbl.Properties(), o.stream.name)
		}
	}
	return out, nil
}

// checkCommitted checks invariant 1: no shard's checkpoint passes committed data. The
// checkpoints are read first and the watermarks last: watermarks only grow, so a checkpoint
// that was correct when written is still covered.
func (o *chaosOracle) checkCommitted(ctx context.Context, when string) error {
	rows, err := o.stream.leases(ctx)
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
		rs, err := o.recs.upTo(ctx, shard, cp)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			o.led.violation("%s check: %v", when, err)
			continue
		}
		recs[shard] = rs
	}
	wms, err := o.watermarks(ctx, o.recs.tables())
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
				o.led.violation("%s check: shard %s is checkpointed at %s (owner %s, epoch %d) but table %s holds that shard only up to %q; its record %s at or below the checkpoint is not committed",
					when, shard, cp, rows[shard].Owner, rows[shard].Epoch, src, wm, seq)
			}
		}
	}
	o.led.with(func(st *chaosStats) {
		st.checks++
		st.records = checked
	})
	return nil
}

// checkFiles checks that no data or delete file is referenced twice by the table's current
// snapshot, that no file was added by two snapshots, and (delete_mode dv) that the current
// snapshot holds at most one deletion vector per data file (the spec's rule; readers refuse a
// second) and none for a data file it no longer holds (a compaction drops a rewritten file's).
// The positional branch (delete_mode position and dv) is checked the same way and must hold no
// equality delete; its snapshots re-add the files of the conversions they mirror, so they are
// left out of the added-twice check.
func (o *chaosOracle) checkFiles(ctx context.Context, src string) (int, error) {
	cat, closeCat, err := o.env.openCatalog(ctx)
	if err != nil {
		return 0, err
	}
	defer closeCat()
	tbl, err := cat.LoadTable(ctx, o.env.tableIdent(src))
	if err != nil {
		return 0, fmt.Errorf("load %s: %w", src, err)
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return 0, err
	}
	n, _, err := o.checkSnapshotFiles(fs, src, "current snapshot", tbl.CurrentSnapshot())
	if err != nil {
		return 0, err
	}
	vectorCommits := 0
	branch := maintenance.DefaultConfig().PositionalBranch
	if at := tbl.Metadata().SnapshotByName(branch); at != nil {
		_, eq, err := o.checkSnapshotFiles(fs, src, "positional branch", at)
		if err != nil {
			return 0, err
		}
		if eq > 0 {
			o.led.violation("table %s: the positional branch (snapshot %d) holds %d equality-delete files", src, at.SnapshotID, eq)
		}
		o.led.with(func(st *chaosStats) { st.branches++ })
	}
	defer func() {
		o.led.with(func(st *chaosStats) { st.vectorCommits += vectorCommits })
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
			o.led.violation("table %s: file %s was added by %d snapshots %v", src, p, len(addedBy[p]), addedBy[p])
		}
	}
	return n, nil
}

// checkSnapshotFiles checks the live files of snap (what names it in violations): no file
// referenced twice, at most one deletion vector per data file and none for a data file snap
// does not hold. It returns the files and deletion vectors checked and the equality-delete files.
func (o *chaosOracle) checkSnapshotFiles(fs icebergio.IO, src, what string, snap *table.Snapshot) (files, eqDeletes int, err error) {
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
			o.led.violation("table %s: file %s is referenced %d times by the %s", src, p, live[p], what)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(vectors)) {
		if vectors[p] > 1 {
			o.led.violation("table %s: data file %s has %d deletion vectors in the %s", src, p, vectors[p], what)
		}
		if !data[p] {
			o.led.violation("table %s: a deletion vector of the %s names data file %s, which it does not hold", src, what, p)
		}
	}
	return len(live) + len(vectors), eqDeletes, nil
}

// complete reports whether every closed shard is at SHARD_END and every open one is
// checkpointed at its last record.
func (o *chaosOracle) complete() (bool, string) {
	all, _, err := o.stream.shardList()
	if err != nil {
		return false, err.Error()
	}
	rows, err := o.stream.leases(o.ctx)
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
		recs, err := o.recs.upTo(o.ctx, id, "")
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

func (o *chaosOracle) verify() {
	stdout, stderr, err := RunCLI(o.t, o.env.bin, "verify", "--config", o.env.verifyConfig, "--expected", o.env.expected, "--max-diffs", "20")
	out := stdout + stderr
	rows := 0
	for _, m := range verifyTableLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		rows += n
		if m[4] != "ok" {
			o.led.violation("verify: table %s: %s", m[1], m[4])
		}
	}
	o.led.with(func(st *chaosStats) { st.rows = rows })
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			o.t.Fatalf("verify could not compare: %v\n%s", err, out)
		}
		o.led.violation("verify found differences:\n%s", out)
		return
	}
	o.led.logf("verify:\n%s", strings.TrimSpace(out))
}

// checkOrphans applies the orphan oracle (orphans.go) to every table once no worker runs: after
// cleanup no data file may be unreferenced by every snapshot, and verify must still pass.
func (o *chaosOracle) checkOrphans() {
	cat, closeCat, err := o.env.openCatalog(o.ctx)
	if err != nil {
		o.t.Fatalf("orphan oracle: %v", err)
	}
	defer closeCat()
	for _, src := range o.recs.tables() {
		id := o.env.tableIdent(src)
		before, _, err := unreferencedDataFiles(o.ctx, cat, id, o.env.s3c)
		if err != nil {
			o.t.Fatalf("orphan oracle: %v", err)
		}
		removed, err := cleanupOrphans(o.ctx, cat, id)
		if err != nil {
			o.t.Fatalf("orphan oracle: %v", err)
		}
		after, _, err := unreferencedDataFiles(o.ctx, cat, id, o.env.s3c)
		if err != nil {
			o.t.Fatalf("orphan oracle: %v", err)
		}
		o.led.with(func(st *chaosStats) {
			st.orphansBefore += len(before)
			st.orphansRemoved += removed
			st.orphansAfter += len(after)
		})
		for _, f := range after {
			o.led.violation("table %s: data file %s is referenced by no snapshot after cleanup", src, f)
		}
	}
	rows := o.led.stats().rows
	o.verify()                                          // the cleanup removed no referenced file
	o.led.with(func(st *chaosStats) { st.rows = rows }) // the same rows, checked again
}
