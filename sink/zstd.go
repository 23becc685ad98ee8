package sink

import (
	"runtime"
	"sync"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/klauspost/compress/zstd"
)

// The Parquet zstd codec: arrow-go's, except for where its page encoders live between pages.
//
// arrow-go (v18.8.0) compresses each Parquet page with an encoder taken from a sync.Pool. Every
// garbage collection empties that pool, and a new encoder at the default level allocates an
// 8 MiB window's history (16 MiB) plus its match tables on its first large page. At this
// service's allocation rate a collection comes every few flushes, so most column chunks paid for
// fresh encoders: in BenchmarkPipeline's memory profile that history was 9 % of all bytes
// allocated, and the work of collecting it came on top. This codec keeps the encoders in a
// small free list that collections do not empty, with a 1 MiB window (a data page's size,
// write.parquet.page-size-bytes: a longer window finds nothing more in a page; history 2 MiB).
// Everything else is arrow-go's codec: decoding, streaming, bounds, the level mapping. The
// frames are ordinary zstd frames from the same library (klauspost/compress), readable by any
// Parquet reader.

// zstdBase is what arrow-go's zstd codec implements.
type zstdBase interface {
	compress.ErrorCodec
	compress.StreamingCodec
}

type zstdCodec struct {
	zstdBase
	mu   sync.Mutex
	free map[zstd.EncoderLevel][]*zstd.Encoder
	keep int // encoders kept per level: more than write pages at once (fileWriters, maintenance)
}

// zstdWindow is the window of the page encoders.
const zstdWindow = 1 << 20

func init() {
	base, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		return
	}
	if b, ok := base.(zstdBase); ok {
		compress.RegisterCodec(compress.Codecs.Zstd, newZstdCodec(b))
	}
}

func newZstdCodec(base zstdBase) *zstdCodec {
	return &zstdCodec{zstdBase: base, free: make(map[zstd.EncoderLevel][]*zstd.Encoder), keep: 2*runtime.GOMAXPROCS(0) + 2}
}

// EncodeLevel compresses one page, as arrow-go's does (same level mapping and options).
func (c *zstdCodec) EncodeLevel(dst, src []byte, level int) []byte {
	lvl := zstd.EncoderLevelFromZstd(level)
	if level == compress.DefaultCompressionLevel {
		lvl = zstd.SpeedDefault
	}
	enc := c.get(lvl)
	if enc == nil {
		return c.zstdBase.EncodeLevel(dst, src, level)
	}
	out := enc.EncodeAll(src, dst[:0])
	c.put(lvl, enc)
	return out
}

func (c *zstdCodec) get(lvl zstd.EncoderLevel) *zstd.Encoder {
	c.mu.Lock()
	if l := c.free[lvl]; len(l) > 0 {
		enc := l[len(l)-1]
		l[len(l)-1] = nil
		c.free[lvl] = l[:len(l)-1]
		c.mu.Unlock()
		return enc
	}
	c.mu.Unlock()
	enc, err := zstd.NewWriter(nil, zstd.WithZeroFrames(true), zstd.WithEncoderLevel(lvl),
		zstd.WithEncoderConcurrency(1), zstd.WithAllLitEntropyCompression(true), zstd.WithWindowSize(zstdWindow))
	if err != nil {
		return nil
	}
	return enc
}

func (c *zstdCodec) put(lvl zstd.EncoderLevel, enc *zstd.Encoder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.free[lvl]) < c.keep {
		c.free[lvl] = append(c.free[lvl], enc)
	}
}
