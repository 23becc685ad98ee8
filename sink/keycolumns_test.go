package sink

import (
	"slices"
	"testing"
)

// A loaded table's key wins over a table-def's; a keyless load removes it and is known as
// keyless (an empty key, not "unknown"); reads allocate nothing.
func TestKeyColumns(t *testing.T) {
	var k keyColumns
	if k.get("shop", "items") != nil {
		t.Fatal("a key before any was set")
	}
	k.set("shop.items", []string{"id"}, false)
	k.set("shop.items", []string{"id", "tenant"}, true)
	k.set("shop.items", []string{"other"}, false) // a later table-def does not replace the loaded key
	if got := k.get("shop", "items"); !slices.Equal(got, []string{"id", "tenant"}) {
		t.Fatalf("key %v", got)
	}
	if n := testing.AllocsPerRun(100, func() { k.get("shop", "items") }); n != 0 {
		t.Fatalf("get allocates %v times", n)
	}
	k.set("shop.items", nil, true)
	if len(k.get("shop", "items")) != 0 {
		t.Fatal("a keyless table kept its key")
	}
	if k.get("shop", "items") == nil {
		t.Fatal("a loaded keyless table is not known as keyless")
	}
}
