package commit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// A commit that lost to another writer is re-staged soon, at every attempt; other failures back
// off exponentially; a closing committer waits less in both cases.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	const conflict, other = true, false
	cases := []struct {
		name     string
		conflict bool
		closing  bool
		attempt  int
		min, max time.Duration
	}{
		{"conflict first", conflict, false, 0, 10 * time.Millisecond, 20 * time.Millisecond},
		{"conflict late", conflict, false, 15, 500 * time.Millisecond, time.Second},
		{"conflict closing", conflict, true, 15, 125 * time.Millisecond, 250 * time.Millisecond},
		{"other first", other, false, 0, 25 * time.Millisecond, 50 * time.Millisecond},
		{"other late", other, false, 15, 10 * time.Second, 20 * time.Second},
		{"other closing", other, true, 15, time.Second, 2 * time.Second},
		{"huge attempt", other, false, 1 << 20, 10 * time.Second, 20 * time.Second},
	}
	for _, c := range cases {
		for range 200 {
			d := RetryDelay(c.attempt, c.conflict, c.closing)
			if d < c.min || d > c.max {
				t.Fatalf("%s: RetryDelay(%d) = %s, want within [%s, %s]", c.name, c.attempt, d, c.min, c.max)
			}
		}
	}
}

// fakeCatalog hands out versions of one table; every LoadTable returns the newest.
type fakeCatalog struct {
	meta    table.Metadata
	version int
	loads   int
	fail    error // returned by LoadTable when set
	// failNext fails that many LoadTable calls first.
	failNext int
}

func newFakeCatalog(t *testing.T) *fakeCatalog {
	t.Helper()
	sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	meta, err := table.NewMetadata(sc, iceberg.UnpartitionedSpec, table.UnsortedSortOrder, "file:///tmp/t", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeCatalog{meta: meta}
}

func (c *fakeCatalog) current() *table.Table {
	return table.New(table.Identifier{"db", "t"}, c.meta, fmt.Sprintf("v%d.metadata.json", c.version), nil, nil)
}

// advance is another writer's commit: the table moves.
func (c *fakeCatalog) advance() { c.version++ }

func (c *fakeCatalog) LoadTable(context.Context, table.Identifier) (*table.Table, error) {
	c.loads++
	if c.fail != nil {
		return nil, c.fail
	}
	if c.failNext > 0 {
		c.failNext--
		return nil, errors.New("503 Service Unavailable")
	}
	return c.current(), nil
}

var ident = table.Identifier{"db", "t"}

// A lost race (the table moved, with no ErrCommitFailed) is reloaded, told to the caller and
// re-staged on the new head, which then commits.
func TestRunRestagesOnTheReloadedHead(t *testing.T) {
	t.Parallel()
	cat := newFakeCatalog(t)
	var staged []string
	var reloaded []string
	op := Op{
		Name: "commit db.t",
		Stage: func(_ context.Context, tbl *table.Table, attempt int) (*table.Table, error) {
			staged = append(staged, tbl.MetadataLocation())
			if attempt < 2 {
				cat.advance() // another writer lands first
				return nil, errors.New("requirement failed: branch main has changed")
			}
			cat.advance()
			return cat.current(), nil
		},
		Reloaded: func(tbl *table.Table) (bool, error) {
			reloaded = append(reloaded, tbl.MetadataLocation())
			return false, nil
		},
	}
	res, err := Run(context.Background(), cat, ident, cat.current(), Policy{Retries: 5}, op)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 3 || res.Landed || res.Table == nil {
		t.Fatalf("result = %+v, want 3 attempts, committed", res)
	}
	if want := []string{"v0.metadata.json", "v1.metadata.json", "v2.metadata.json"}; fmt.Sprint(staged) != fmt.Sprint(want) {
		t.Fatalf("staged on %v, want %v", staged, want)
	}
	if want := []string{"v1.metadata.json", "v2.metadata.json"}; fmt.Sprint(reloaded) != fmt.Sprint(want) {
		t.Fatalf("reloaded %v, want %v", reloaded, want)
	}
}

// When the reloaded table already holds the change (an unknown outcome that landed), the loop
// ends without another attempt.
func TestRunEndsWhenTheReloadedTableHoldsTheChange(t *testing.T) {
	t.Parallel()
	cat := newFakeCatalog(t)
	stages := 0
	op := Op{
		Name: "commit db.t",
		Stage: func(context.Context, *table.Table, int) (*table.Table, error) {
			stages++
			cat.advance() // the commit landed, but its response was lost
			return nil, errors.New("connection reset")
		},
		Reloaded: func(*table.Table) (bool, error) { return true, nil },
	}
	res, err := Run(context.Background(), cat, ident, cat.current(), Policy{Retries: 5}, op)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Landed || res.Attempts != 1 || stages != 1 || res.Table != nil {
		t.Fatalf("result = %+v after %d stages, want landed after 1", res, stages)
	}
}

// Retries bound the attempts; a permanent error and an error from Reloaded end the loop at once.
func TestRunGivesUp(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := []struct {
		name     string
		stageErr error
		reloaded func(*table.Table) (bool, error)
		attempts int
	}{
		{"retries exhausted", errTimeout, nil, 3},
		{"permanent", Permanent(boom), nil, 1},
		{"reloaded refuses", table.ErrCommitFailed, func(*table.Table) (bool, error) { return false, boom }, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cat := newFakeCatalog(t)
			stages := 0
			failed := 0
			op := Op{
				Name: "commit db.t",
				Stage: func(context.Context, *table.Table, int) (*table.Table, error) {
					stages++
					return nil, c.stageErr
				},
				Reloaded: c.reloaded,
				Failed:   func(int, error, error) { failed++ },
			}
			res, err := Run(context.Background(), cat, ident, cat.current(), Policy{Retries: 2}, op)
			if err == nil {
				t.Fatal("Run succeeded, want an error")
			}
			if stages != c.attempts || res.Attempts != c.attempts {
				t.Fatalf("%d stages, result %+v, want %d", stages, res, c.attempts)
			}
			if c.name == "retries exhausted" && (!errors.Is(err, errTimeout) || failed != 3) {
				t.Fatalf("err = %v after %d failures, want the timeout after 3", err, failed)
			}
			if c.name != "retries exhausted" && !errors.Is(err, boom) {
				t.Fatalf("err = %v, want boom", err)
			}
		})
	}
}

var errTimeout = errors.New("catalog timeout")

// Lost races do not use up a table writer's retries (another writer made progress; giving up
// would stop the service), but they do use up those of a commit that yields (maintenance).
func TestRunLostRacesCountOnlyWhenYielding(t *testing.T) {
	t.Parallel()
	for _, yield := range []bool{false, true} {
		cat := newFakeCatalog(t)
		stages := 0
		op := Op{
			Name: "commit db.t",
			Stage: func(_ context.Context, tbl *table.Table, _ int) (*table.Table, error) {
				stages++
				if stages <= 5 {
					cat.advance() // another writer lands first, five times
					return nil, errors.New("requirement failed: branch main has changed")
				}
				return tbl, nil
			},
		}
		_, err := Run(context.Background(), cat, ident, cat.current(), Policy{Retries: 2, Yield: yield}, op)
		switch {
		case !yield && (err != nil || stages != 6):
			t.Fatalf("writer: err = %v after %d stages, want success after 6", err, stages)
		case yield && (err == nil || stages != 3):
			t.Fatalf("yielding: err = %v after %d stages, want giving up after 3", err, stages)
		}
	}
}

// A closing committer does not count attempts: it keeps trying until its context ends.
func TestRunWhileClosingTriesUntilTheContextEnds(t *testing.T) {
	t.Parallel()
	cat := newFakeCatalog(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stages := 0
	op := Op{
		Name: "commit db.t",
		Stage: func(context.Context, *table.Table, int) (*table.Table, error) {
			stages++
			if stages == 8 {
				cancel()
			}
			cat.advance()
			return nil, table.ErrCommitFailed
		},
	}
	_, err := Run(ctx, cat, ident, cat.current(), Policy{Retries: 1, Closing: func() bool { return true }}, op)
	if !errors.Is(err, context.Canceled) || stages != 8 {
		t.Fatalf("err = %v after %d stages, want context.Canceled after 8", err, stages)
	}
}

// A failed reload keeps the old head and tries again; Failed sees the reload error.
func TestRunSurvivesAFailedReload(t *testing.T) {
	t.Parallel()
	cat := newFakeCatalog(t)
	cat.fail = errors.New("catalog unavailable")
	var reloadErrs []error
	op := Op{
		Name: "commit db.t",
		Stage: func(_ context.Context, tbl *table.Table, attempt int) (*table.Table, error) {
			if attempt == 0 {
				return nil, errors.New("timeout")
			}
			if tbl.MetadataLocation() != "v0.metadata.json" {
				t.Errorf("attempt %d staged on %s, want the old head", attempt, tbl.MetadataLocation())
			}
			return tbl, nil
		},
		Reloaded: func(*table.Table) (bool, error) { t.Error("Reloaded called after a failed reload"); return false, nil },
		Failed:   func(_ int, _, rerr error) { reloadErrs = append(reloadErrs, rerr) },
	}
	res, err := Run(context.Background(), cat, ident, cat.current(), Policy{Retries: 3}, op)
	if err != nil || res.Attempts != 2 {
		t.Fatalf("Run = %+v, %v; want success after 2 attempts", res, err)
	}
	if len(reloadErrs) != 1 || reloadErrs[0] == nil {
		t.Fatalf("Failed saw reload errors %v, want one", reloadErrs)
	}
}

// A table whose commit.retry.num-retries asks iceberg-go to replay lost races is never staged
// on: every attempt fails with an error naming the property (and waits as usual) until the
// property is gone, then the commit goes ahead. Without the guard, iceberg-go would replay the
// watermarks over another writer's.
func TestRunRefusesATableThatMakesIcebergGoReplay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		value  string
		refuse bool
	}{{"3", true}, {"x", true}, {"0", false}} {
		cat := newFakeCatalog(t)
		plain := cat.meta
		sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
		meta, err := table.NewMetadata(sc, iceberg.UnpartitionedSpec, table.UnsortedSortOrder, "file:///tmp/t",
			iceberg.Properties{table.CommitNumRetriesKey: c.value})
		if err != nil {
			t.Fatal(err)
		}
		cat.meta = meta
		var failures []error
		stagedOn := ""
		op := Op{
			Name: "commit db.t",
			Stage: func(_ context.Context, tbl *table.Table, _ int) (*table.Table, error) {
				stagedOn = tbl.Properties()[table.CommitNumRetriesKey]
				return tbl, nil
			},
			Failed: func(attempt int, err, _ error) {
				failures = append(failures, err)
				if attempt == 0 { // the head is reloaded before Failed: attempt 1 still sees it
					cat.meta = plain // an operator removed the property
					cat.advance()
				}
			},
		}
		res, err := Run(context.Background(), cat, ident, cat.current(), Policy{Retries: 5}, op)
		if err != nil {
			t.Fatalf("%s: %v", c.value, err)
		}
		switch {
		case c.refuse && (len(failures) != 2 || !strings.Contains(failures[0].Error(), table.CommitNumRetriesKey) || stagedOn != "" || res.Attempts != 3):
			t.Fatalf("num-retries=%s: failures %v, staged on a table with %q, %d attempts; want 2 refusals naming the property, then a commit without it",
				c.value, failures, stagedOn, res.Attempts)
		case !c.refuse && (len(failures) != 0 || res.Attempts != 1):
			t.Fatalf("num-retries=0: failures %v, %d attempts; want one attempt", failures, res.Attempts)
		}
	}
}

// A dependency that accepts a request and never answers: an attempt that outlives the policy's
// AttemptTimeout ends with its context's deadline, counts as a failed attempt, and the next one
// goes ahead; the outer context is untouched. Without the timeout the first attempt would wait
// for ever.
func TestRunBoundsEachAttempt(t *testing.T) {
	t.Parallel()
	cat := newFakeCatalog(t)
	var failed []error
	op := Op{
		Name: "commit db.t",
		Stage: func(ctx context.Context, tbl *table.Table, attempt int) (*table.Table, error) {
			if attempt == 0 {
				<-ctx.Done() // the server never answers
				return nil, ctx.Err()
			}
			return tbl, nil
		},
		Failed: func(_ int, err, _ error) { failed = append(failed, err) },
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang bound for the test
	defer cancel()
	res, err := Run(ctx, cat, ident, cat.current(), Policy{Retries: 3, AttemptTimeout: 50 * time.Millisecond}, op)
	if err != nil || res.Attempts != 2 {
		t.Fatalf("Run = %+v, %v; want success at the second attempt", res, err)
	}
	if len(failed) != 1 || !errors.Is(failed[0], context.DeadlineExceeded) {
		t.Fatalf("failed attempts %v, want one that ran past its deadline", failed)
	}
}

// An attempt whose commit request was sent and failed without a definite answer (a lost
// response, a timeout, a 5xx) has an unknown outcome, which the reload after it resolves: the
// change landed (by this loop: Mine), another writer committed the same change, or it did not
// land and the loop tries again. A lost race (ErrCommitFailed, a failed requirement) and a
// failure before the request was sent are not unknown outcomes. Each unknown outcome is reported
// once, when it is resolved; unknown outcomes still unresolved when the next attempt commits
// did not land (that attempt was staged on the same head, so it would have lost the race).
func TestRunResolvesUnknownOutcomes(t *testing.T) {
	t.Parallel()
	lost := Sent(errors.New("Post \"http://catalog/v1/namespaces/db/tables/t\": read: connection reset by peer"))
	refused := Sent(fmt.Errorf("commit failed due to unknown reason: 503 Service Unavailable"))
	cases := []struct {
		name string
		// fail is the error of each failing attempt; landed says whether it took effect.
		fail      []error
		landed    []bool
		failLoads int  // reloads that fail first
		holds     bool // Reloaded: the table holds the change after a landed attempt
		mine      bool // the landing is this loop's
		want      []Outcome
		wantLand  bool
	}{
		{name: "lost answer, landed", fail: []error{lost}, landed: []bool{true}, holds: true, mine: true,
			want: []Outcome{OutcomeLanded}, wantLand: true},
		{name: "another writer committed it", fail: []error{lost}, landed: []bool{true}, holds: true, mine: false,
			want: []Outcome{OutcomeAnotherWriter}, wantLand: true},
		{name: "5xx, not landed", fail: []error{refused}, landed: []bool{false}, want: []Outcome{OutcomeNotLanded}},
		{name: "timeout", fail: []error{Sent(context.DeadlineExceeded)}, landed: []bool{false}, want: []Outcome{OutcomeNotLanded}},
		{name: "lost race", fail: []error{Sent(fmt.Errorf("conflict: %w", table.ErrCommitFailed))}, landed: []bool{false}},
		{name: "failed requirement", fail: []error{Sent(errors.New("requirement failed: branch main has changed: expected id 1, found 2"))}, landed: []bool{false}},
		{name: "not sent", fail: []error{errors.New("write data file: 503 Slow Down")}, landed: []bool{false}},
		{name: "reload failed, next attempt committed", fail: []error{refused}, landed: []bool{false}, failLoads: 1,
			want: []Outcome{OutcomeNotLanded}},
		{name: "two unknown, the second landed", fail: []error{refused, lost}, landed: []bool{false, true}, failLoads: 1,
			holds: true, mine: true, want: []Outcome{OutcomeNotLanded, OutcomeLanded}, wantLand: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cat := newFakeCatalog(t)
			cat.failNext = c.failLoads
			landedAt := ""
			var got []Outcome
			op := Op{
				Name: "commit db.t",
				Stage: func(_ context.Context, tbl *table.Table, attempt int) (*table.Table, error) {
					if attempt < len(c.fail) {
						if c.landed[attempt] {
							cat.advance()
							landedAt = cat.current().MetadataLocation()
						}
						return nil, c.fail[attempt]
					}
					cat.advance()
					return cat.current(), nil
				},
				Reloaded: func(tbl *table.Table) (bool, error) {
					return c.holds && tbl.MetadataLocation() == landedAt, nil
				},
				Mine: func(since, fresh *table.Table) bool {
					if since == nil || !Moved(since, fresh) {
						t.Errorf("Mine(%v, %v): want the table the unknown attempt was staged on and a later one", since, fresh)
					}
					return c.mine
				},
				Resolved: func(o Outcome) { got = append(got, o) },
			}
			res, err := Run(context.Background(), cat, ident, cat.current(), Policy{Retries: 5}, op)
			if err != nil {
				t.Fatal(err)
			}
			if res.Landed != c.wantLand {
				t.Errorf("Landed = %v, want %v", res.Landed, c.wantLand)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("resolved %v, want %v", got, c.want)
			}
		})
	}
}

// UnknownOutcome: only a sent request that failed without a definite answer.
func TestUnknownOutcome(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("connection reset"), false}, // not marked as sent
		{Sent(errors.New("connection reset")), true},
		{fmt.Errorf("commit shop.t: %w", Sent(context.DeadlineExceeded)), true},
		{Sent(fmt.Errorf("%w", table.ErrCommitFailed)), false},
		{Sent(errors.New("Requirement failed: current schema id has changed")), false},
		{Sent(Permanent(errors.New("bad"))), false},
		{Permanent(Sent(errors.New("bad"))), false},
		{Sent(context.Canceled), false},
	} {
		if got := UnknownOutcome(c.err); got != c.want {
			t.Errorf("UnknownOutcome(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
