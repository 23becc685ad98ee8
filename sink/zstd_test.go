package sink

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/compress"
)

// The registered Parquet zstd codec is ours, and what it writes arrow-go decodes back, at every
// level a table can ask for, concurrently.
func TestZstdCodecRoundTrip(t *testing.T) {
	c, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*zstdCodec); !ok {
		t.Fatalf("registered zstd codec is %T, want *zstdCodec", c)
	}
	var pages [][]byte
	for _, n := range []int{0, 1, 100, 64 << 10, 200 << 10, 3 << 20} {
		var b bytes.Buffer
		for i := 0; b.Len() < n; i++ {
			fmt.Fprintf(&b, "row %d customer-%d@example.com %d.%02d|", i, i%977, i*7, i%100)
		}
		pages = append(pages, b.Bytes()[:n])
	}
	var wg sync.WaitGroup
	for _, level := range []int{compress.DefaultCompressionLevel, 1, 3, 9} {
		for _, p := range pages {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 3 {
					dst := make([]byte, 0, c.CompressBound(int64(len(p))+1))
					out := c.EncodeLevel(dst, p, level)
					got, err := compress.Decode(c, make([]byte, len(p)), out)
					if err != nil || !bytes.Equal(got, p) {
						t.Errorf("level %d, %d bytes: round trip failed (err %v)", level, len(p), err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
}
