package workload

import (
	"context"
	"crypto/md5"
	"math/big"
	"reflect"
	"testing"
	"time"
)

func TestEvenHashRanges(t *testing.T) {
	// The ranges Kinesis gives a new stream of 4 and of 3 shards.
	for n, want := range map[int][]string{
		4: {"0", "85070591730234615865843651857942052863",
			"85070591730234615865843651857942052864", "170141183460469231731687303715884105727",
			"170141183460469231731687303715884105728", "255211775190703847597530955573826158591",
			"255211775190703847597530955573826158592", "340282366920938463463374607431768211455"},
		3: {"0", "113427455640312821154458202477256070484",
			"113427455640312821154458202477256070485", "226854911280625642308916404954512140969",
			"226854911280625642308916404954512140970", "340282366920938463463374607431768211455"},
	} {
		var got []string
		for _, h := range EvenHashRanges(n) {
			got = append(got, h.Start.String(), h.End.String())
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%d shards: %v\nwant %v", n, got, want)
		}
	}
	// Every n covers the key space without gaps or overlaps.
	one := big.NewInt(1)
	for n := 1; n <= 17; n++ {
		rs := EvenHashRanges(n)
		next := new(big.Int)
		for i, h := range rs {
			s, e := new(big.Int).SetBytes(h.Start[:]), new(big.Int).SetBytes(h.End[:])
			if s.Cmp(next) != 0 || e.Cmp(s) < 0 {
				t.Fatalf("%d shards: range %d is %s", n, i, h)
			}
			next.Add(e, one)
		}
		if next.Cmp(new(big.Int).Lsh(one, 128)) != 0 {
			t.Fatalf("%d shards end at %s", n, next)
		}
	}
}

func TestHashRangeContains(t *testing.T) {
	rs := EvenHashRanges(4)
	counts := make([]int, 4)
	for _, pk := range []string{"shop.customers", "shop.order_items", "shop.events", "shop.types", "TASK.shop.customers"} {
		sum := md5.Sum([]byte(pk))
		k := new(big.Int).SetBytes(sum[:])
		want := int(new(big.Int).Rsh(k, 126).Int64()) // top two bits pick one of 4 even shards
		if got := ShardOf(pk, rs); got != want {
			t.Errorf("ShardOf(%q) = %d, want %d", pk, got, want)
		}
		counts[want]++
		if HashKeyOf(pk).String() != k.String() {
			t.Errorf("HashKeyOf(%q) = %s, want %s", pk, HashKeyOf(pk), k)
		}
	}
	h, err := ParseHashRange(rs[2].Start.String(), rs[2].End.String())
	if err != nil || h != rs[2] {
		t.Fatalf("ParseHashRange round trip: %v, %v", h, err)
	}
	for _, bad := range [][2]string{{"1", "0"}, {"-1", "5"}, {"x", "5"}, {"0", "340282366920938463463374607431768211456"}} {
		if _, err := ParseHashRange(bad[0], bad[1]); err == nil {
			t.Errorf("ParseHashRange(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// fakeClock is a clock whose time advances only when told: the source advances it per record,
// Sleep by the duration slept.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.now = c.now.Add(d)
	return nil
}

type timed struct {
	m          Message
	seq        int // position in the source
	taken, out time.Time
}

// runLag runs msgs through DelayShard with a fake clock on which taking a record from the source
// costs 1 ms, and returns what came out, with the time each record was taken and yielded.
func runLag(t *testing.T, msgs []Message, lag Lag) []timed {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	lag.Now, lag.Sleep = clk.Now, clk.Sleep
	taken := map[*byte]timed{}
	src := func(yield func(Message) bool) {
		for i, m := range msgs {
			clk.now = clk.now.Add(time.Millisecond)
			taken[&m.Data[0]] = timed{seq: i, taken: clk.now}
			if !yield(m) {
				return
			}
		}
	}
	var out []timed
	for m := range DelayShard(context.Background(), src, lag) {
		tm := taken[&m.Data[0]]
		tm.m, tm.out = m, clk.now
		out = append(out, tm)
	}
	return out
}

func TestDelayShardOnlyDelays(t *testing.T) {
	msgs := collect(New(Config{Seed: 31, Changes: 3000, LoadRows: 100, Layout: LayoutDMSDefault}))
	ranges := EvenHashRanges(4)
	// The shard of customers' CDC: it lags with load records of every table.
	lagging := ShardOf("shop.customers", ranges)
	for _, tc := range []struct {
		name    string
		maxHeld int
	}{{"unbounded", 0}, {"bounded", 25}} {
		t.Run(tc.name, func(t *testing.T) {
			const delay = 200 * time.Millisecond
			lag := Lag{Range: ranges[lagging], Delay: delay, MaxHeld: tc.maxHeld}
			out := runLag(t, msgs, lag)
			if len(out) != len(msgs) {
				t.Fatalf("%d records out of %d", len(out), len(msgs))
			}
			// Nothing lost or duplicated, order kept per partition key and per shard.
			seen := make([]bool, len(msgs))
			perKey := map[string]int{}
			perShard := map[int]int{}
			lagged, overtaken, maxHeld := 0, 0, 0
			lastOther := -1
			for _, o := range out {
				if seen[o.seq] {
					t.Fatalf("record %d yielded twice", o.seq)
				}
				seen[o.seq] = true
				if p, ok := perKey[o.m.PartitionKey]; ok && p > o.seq {
					t.Fatalf("partition key %s: record %d after record %d", o.m.PartitionKey, o.seq, p)
				}
				perKey[o.m.PartitionKey] = o.seq
				sh := ShardOf(o.m.PartitionKey, ranges)
				if p, ok := perShard[sh]; ok && p > o.seq {
					t.Fatalf("shard %d: record %d after record %d", sh, o.seq, p)
				}
				perShard[sh] = o.seq
				if sh != lagging {
					if tc.maxHeld == 0 && !o.out.Equal(o.taken) {
						t.Fatalf("record %d of shard %d delayed by %s", o.seq, sh, o.out.Sub(o.taken))
					}
					lastOther = max(lastOther, o.seq)
					continue
				}
				lagged++
				if o.out.Sub(o.taken) < delay {
					t.Fatalf("record %d of the lagging shard delayed by %s only", o.seq, o.out.Sub(o.taken))
				}
				if lastOther > o.seq {
					overtaken++
				}
			}
			// Held count over time: a lagging record is held from taken to out; both orders are
			// the source order (checked above).
			var lagList []timed
			for _, o := range out {
				if ShardOf(o.m.PartitionKey, ranges) == lagging {
					lagList = append(lagList, o)
				}
			}
			released := 0
			for i, o := range lagList {
				for released < i && !lagList[released].out.After(o.taken) {
					released++
				}
				maxHeld = max(maxHeld, i+1-released)
			}
			if tc.maxHeld > 0 && maxHeld > tc.maxHeld {
				t.Fatalf("%d records held at once, bound %d", maxHeld, tc.maxHeld)
			}
			if lagged == 0 || overtaken == 0 {
				t.Fatalf("%d lagging records, %d of them overtaken by other shards' later records", lagged, overtaken)
			}
			t.Logf("%d of %d records lagged, %d overtaken, at most %d held", lagged, len(out), overtaken, maxHeld)
		})
	}
}

func TestDelayShardStops(t *testing.T) {
	msgs := collect(New(Config{Seed: 32, Changes: 200, LoadRows: 10}))
	// Zero delay passes the source through.
	var n int
	for range DelayShard(context.Background(), func(yield func(Message) bool) {
		for _, m := range msgs {
			if !yield(m) {
				return
			}
		}
	}, Lag{Range: EvenHashRanges(1)[0]}) {
		n++
	}
	if n != len(msgs) {
		t.Fatalf("zero delay: %d of %d records", n, len(msgs))
	}
	// A cancelled context stops the wait for held records.
	ctx, cancel := context.WithCancel(context.Background())
	clk := &fakeClock{now: time.Unix(0, 0)}
	n = 0
	for range DelayShard(ctx, func(yield func(Message) bool) {
		for _, m := range msgs {
			if !yield(m) {
				return
			}
		}
		cancel()
	}, Lag{Range: EvenHashRanges(1)[0], Delay: time.Hour, Now: clk.Now, Sleep: clk.Sleep}) {
		n++
	}
	if n != 0 {
		t.Fatalf("%d records yielded after cancel (all were held)", n)
	}
	// The caller stopping early stops the sequence.
	n = 0
	for range DelayShard(context.Background(), New(Config{Seed: 32, Changes: 200}).Messages(), Lag{Range: EvenHashRanges(2)[0], Delay: time.Millisecond}) {
		if n++; n == 3 {
			break
		}
	}
}
