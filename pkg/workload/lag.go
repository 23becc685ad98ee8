package workload

import (
	"bytes"
	"context"
	"crypto/md5"
	"fmt"
	"iter"
	"math/big"
	"time"
)

// HashKey is a 128-bit Kinesis hash key, big-endian: Kinesis maps a record to the shard whose
// hash-key range holds the MD5 of its partition key, read as an unsigned integer.
type HashKey [16]byte

// HashKeyOf returns the hash key of a Kinesis partition key.
func HashKeyOf(partitionKey string) HashKey { return md5.Sum([]byte(partitionKey)) }

// String returns the key in decimal, as Kinesis writes hash keys.
func (k HashKey) String() string { return new(big.Int).SetBytes(k[:]).String() }

// ParseHashKey reads a decimal hash key (StartingHashKey, EndingHashKey of ListShards).
func ParseHashKey(s string) (HashKey, error) {
	var k HashKey
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || n.Sign() < 0 || n.BitLen() > 128 {
		return k, fmt.Errorf("workload: %q is not a 128-bit hash key", s)
	}
	n.FillBytes(k[:])
	return k, nil
}

// HashRange is the closed hash-key range [Start, End] of one shard.
type HashRange struct {
	Start, End HashKey
}

// ParseHashRange reads a shard's HashKeyRange as ListShards returns it (decimal strings).
func ParseHashRange(start, end string) (HashRange, error) {
	s, err := ParseHashKey(start)
	if err != nil {
		return HashRange{}, err
	}
	e, err := ParseHashKey(end)
	if err != nil {
		return HashRange{}, err
	}
	if bytes.Compare(s[:], e[:]) > 0 {
		return HashRange{}, fmt.Errorf("workload: hash range %s..%s is empty", start, end)
	}
	return HashRange{Start: s, End: e}, nil
}

// Contains reports whether records with partitionKey map to the range.
func (h HashRange) Contains(partitionKey string) bool {
	k := HashKeyOf(partitionKey)
	return bytes.Compare(k[:], h.Start[:]) >= 0 && bytes.Compare(k[:], h.End[:]) <= 0
}

// String returns "start..end" in decimal.
func (h HashRange) String() string { return h.Start.String() + ".." + h.End.String() }

// EvenHashRanges returns the hash-key ranges of the n shards of a freshly created stream, in
// order: Kinesis splits the key space evenly, shard i starting at i*floor(2^128/n), the last one
// ending at 2^128-1. It panics if n < 1.
func EvenHashRanges(n int) []HashRange {
	if n < 1 {
		panic("workload: EvenHashRanges needs at least one shard")
	}
	space := new(big.Int).Lsh(big.NewInt(1), 128)
	step := new(big.Int).Div(space, big.NewInt(int64(n)))
	out := make([]HashRange, n)
	start := new(big.Int)
	for i := range out {
		end := new(big.Int).Add(start, step)
		if i == n-1 {
			end.Set(space)
		}
		end.Sub(end, big.NewInt(1))
		start.FillBytes(out[i].Start[:])
		end.FillBytes(out[i].End[:])
		start.Add(start, step)
	}
	return out
}

// ShardOf returns the index of the range in ranges that holds partitionKey's hash key, or -1.
func ShardOf(partitionKey string, ranges []HashRange) int {
	for i, h := range ranges {
		if h.Contains(partitionKey) {
			return i
		}
	}
	return -1
}

// Lag makes one shard lag: DelayShard holds back the records whose partition key maps to Range
// and releases each Delay after it was taken from the source, so that they arrive that much
// later than the records around them.
type Lag struct {
	// Range is the hash-key range of the lagging shard (a ListShards HashKeyRange, or an element
	// of EvenHashRanges for a fresh stream).
	Range HashRange
	// Delay is how long each of its records is held back. Zero: nothing is delayed.
	Delay time.Duration
	// MaxHeld bounds the held records (default 1<<20). When it is reached, DelayShard waits for
	// the oldest to be due before it takes the next record from the source, which delays the
	// other records too but keeps the bound.
	MaxHeld int
	// Now and Sleep are the clock (default time.Now and a timer honouring ctx); tests replace
	// them.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// held is a record held back until due.
type held struct {
	m   Message
	due time.Time
}

// DelayShard returns src with lag applied. Records of other shards keep their order and are
// passed on as soon as they are taken; held records keep their order among themselves (they are
// due in the order they were taken). All records of one partition key map to the same shard,
// so the order per partition key, and so per shard, is src's. Nothing is dropped: once src is
// exhausted DelayShard waits for the held records and yields them. It stops early only when ctx
// is done or the caller stops iterating. The sequence is not safe for concurrent iteration.
func DelayShard(ctx context.Context, src iter.Seq[Message], lag Lag) iter.Seq[Message] {
	if lag.Delay <= 0 {
		return src
	}
	if lag.Now == nil {
		lag.Now = time.Now
	}
	if lag.Sleep == nil {
		lag.Sleep = sleepCtx
	}
	if lag.MaxHeld <= 0 {
		lag.MaxHeld = 1 << 20
	}
	return func(yield func(Message) bool) {
		var q []held // FIFO; q[head:] are held
		head := 0
		// release yields the held records that are due (all of them if wait, sleeping as
		// needed), and waits for the oldest while the queue is full, so that at most MaxHeld
		// are held while the next record is taken.
		release := func(wait bool) bool {
			for head < len(q) {
				d := q[head].due.Sub(lag.Now())
				if d > 0 {
					if !wait && len(q)-head < lag.MaxHeld {
						return true
					}
					if lag.Sleep(ctx, d) != nil {
						return false
					}
					continue
				}
				m := q[head].m
				q[head] = held{}
				head++
				if !yield(m) {
					return false
				}
			}
			q, head = q[:0], 0
			return true
		}
		for m := range src {
			if ctx.Err() != nil || !release(false) {
				return
			}
			if lag.Range.Contains(m.PartitionKey) {
				if head > 0 && head == len(q)/2 {
					q, head = append(q[:0], q[head:]...), 0 // compact the consumed half
				}
				q = append(q, held{m: m, due: lag.Now().Add(lag.Delay)})
				if !release(false) { // waits for the oldest if the queue is full
					return
				}
				continue
			}
			if !yield(m) {
				return
			}
		}
		release(true)
	}
}
