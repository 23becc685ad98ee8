package maintenance_test

import (
	"testing"
	"time"

	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

func TestExpirable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, _ := seeded(t, dir, 5, 5)
	meta := loadUsers(t, h.cat).Metadata()
	now := time.Now()
	if n := maintenance.Expirable(meta, 2, 0, now.Add(time.Second)); n != 4 {
		t.Fatalf("expirable(keep 2, retention 0) = %d of 6, want 4", n)
	}
	if n := maintenance.Expirable(meta, 2, time.Hour, now); n != 0 {
		t.Fatalf("expirable within retention = %d, want 0", n)
	}
	h.close()
}
