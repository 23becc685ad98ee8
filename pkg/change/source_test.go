package change

import "testing"

// Within one millisecond of a shard, a record's gate position is raised to the greatest before
// it; a new millisecond starts again from the record's own position.
func TestTieRaiser(t *testing.T) {
	var r TieRaiser
	p := func(tx string) SourcePos { return SourcePos{TxID: tx} }
	steps := []struct {
		at     int64
		pos    string
		want   string
		raised bool
	}{{100, "5", "5", false}, {100, "3", "5", true}, {100, "7", "7", false}, {100, "6", "7", true}, {101, "2", "2", false}, {101, "4", "4", false}}
	for i, s := range steps {
		got, raised := r.Next(s.at, p(s.pos))
		if got.TxID != s.want || raised != s.raised {
			t.Fatalf("step %d: %v %v, want %s %v", i, got, raised, s.want, s.raised)
		}
	}
}
