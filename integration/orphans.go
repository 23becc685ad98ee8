//go:build integration

package integration

// The orphan oracle of the dependency-fault tests and of the chaos run. A write that failed or
// whose answer was lost leaves files no snapshot references (a data file written for a commit
// attempt that was then re-staged with new files, an object PUT that took effect while the
// client saw an error). They are harmless until cleanup, and cleanup must remove them all
// without touching a referenced file. "After cleanup" is defined as: once no worker runs, the
// service's own maintenance run (maintenance.RunTable, the code of `dms2iceberg maintain`:
// compaction, snapshot expiry, manifest rewrite, orphan cleanup) with the orphan minimum age
// lifted (RunOptions.OrphansOfAnyAge; the service's lowest orphan_min_age is an hour, which a
// test cannot wait for). Then no file under the table's data directory may be unreferenced by
// every snapshot, and the tables must still verify.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"
	"sort"
	"strings"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

// unreferencedDataFiles lists the files under the table's data directory that no snapshot of
// the table references (as data or delete file, in any manifest entry), and counts the
// referenced ones. s3c lists an s3:// location (nil: file:// only).
func unreferencedDataFiles(ctx context.Context, cat catalog.Catalog, id table.Identifier, s3c *s3.Client) (orphans []string, referenced int, err error) {
	tbl, err := cat.LoadTable(ctx, id)
	if err != nil {
		return nil, 0, fmt.Errorf("load %v: %w", id, err)
	}
	ifs, err := tbl.FS(ctx)
	if err != nil {
		return nil, 0, err
	}
	refs := map[string]bool{}
	seen := map[string]bool{}
	for _, snap := range tbl.Metadata().Snapshots() {
		mans, err := snap.Manifests(ifs)
		if err != nil {
			return nil, 0, fmt.Errorf("%v: manifests of snapshot %d: %w", id, snap.SnapshotID, err)
		}
		for _, m := range mans {
			if seen[m.FilePath()] {
				continue
			}
			seen[m.FilePath()] = true
			for e, err := range m.Entries(ifs, false) {
				if err != nil {
					return nil, 0, fmt.Errorf("%v: manifest %s: %w", id, m.FilePath(), err)
				}
				refs[normPath(e.DataFile().FilePath())] = true
			}
		}
	}
	files, err := listFiles(ctx, strings.TrimSuffix(tbl.Location(), "/")+"/data/", s3c)
	if err != nil {
		return nil, 0, err
	}
	for _, f := range files {
		if !refs[normPath(f)] {
			orphans = append(orphans, f)
		}
	}
	sort.Strings(orphans)
	return orphans, len(refs), nil
}

// normPath makes file:///x and /x the same.
func normPath(p string) string {
	if rest, ok := strings.CutPrefix(p, "file://"); ok {
		return rest
	}
	return p
}

// listFiles lists every file under loc (file:// or a plain path, or s3://bucket/prefix).
func listFiles(ctx context.Context, loc string, s3c *s3.Client) ([]string, error) {
	u, err := url.Parse(loc)
	if err != nil {
		return nil, err
	}
	var out []string
	switch u.Scheme {
	case "", "file":
		err := filepath.WalkDir(u.Path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == u.Path && errors.Is(err, fs.ErrNotExist) {
					return filepath.SkipDir
				}
				return err
			}
			if !d.IsDir() {
				out = append(out, p)
			}
			return nil
		})
		return out, err
	case "s3", "s3a":
		if s3c == nil {
			return nil, fmt.Errorf("list %s: no S3 client", loc)
		}
		pg := s3.NewListObjectsV2Paginator(s3c, &s3.ListObjectsV2Input{Bucket: aws.String(u.Host), Prefix: aws.String(strings.TrimPrefix(u.Path, "/"))})
		for pg.HasMorePages() {
			page, err := pg.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", loc, err)
			}
			for _, o := range page.Contents {
				out = append(out, u.Scheme+"://"+u.Host+"/"+aws.ToString(o.Key))
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("list %s: unsupported scheme", loc)
}

// cleanupOrphans runs the service's maintenance on the table with the orphan minimum age lifted
// (see the file comment) and returns how many orphan files it removed.
func cleanupOrphans(ctx context.Context, cat catalog.Catalog, id table.Identifier) (int, error) {
	rep, err := maintenance.RunTable(ctx, cat, id, maintenance.DefaultConfig(), maintenance.RunOptions{IgnoreLease: true, OrphansOfAnyAge: true})
	if err != nil {
		return 0, fmt.Errorf("maintain %v: %w", id, err)
	}
	return rep.OrphansRemoved, nil
}

// orphanReport is the orphan oracle's finding for the tables of one namespace.
type orphanReport struct {
	before, removed, referenced int
	after                       []string // unreferenced data files after cleanup: each one a difference
}

// checkOrphans applies the orphan oracle to every table of namespace ns.
func checkOrphans(ctx context.Context, cat catalog.Catalog, ns string, s3c *s3.Client) (orphanReport, error) {
	var r orphanReport
	for id, err := range cat.ListTables(ctx, table.Identifier{ns}) {
		if err != nil {
			return r, err
		}
		before, _, err := unreferencedDataFiles(ctx, cat, id, s3c)
		if err != nil {
			return r, err
		}
		removed, err := cleanupOrphans(ctx, cat, id)
		if err != nil {
			return r, err
		}
		after, refs, err := unreferencedDataFiles(ctx, cat, id, s3c)
		if err != nil {
			return r, err
		}
		r.before += len(before)
		r.removed += removed
		r.referenced += refs
		r.after = append(r.after, after...)
	}
	return r, nil
}
