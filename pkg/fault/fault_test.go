package fault

import "testing"

func TestAtCountAndUnknown(t *testing.T) {
	var killed []string
	kill = func(p string) { killed = append(killed, p) }
	t.Cleanup(func() { _ = Configure("") })
	if err := Configure("after-commit@3, after-decode%1"); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		Hit(AfterCommit)
	}
	Hit(AfterDecode)
	Hit(AfterCheckpoint)
	if len(killed) != 2 || killed[0] != AfterCommit || killed[1] != AfterDecode {
		t.Fatalf("killed at %v, want [after-commit after-decode]", killed)
	}
	for _, bad := range []string{"nope@1", "after-commit@0", "after-commit%2", "after-commit"} {
		if err := Configure(bad); err == nil {
			t.Errorf("Configure(%q) accepted", bad)
		}
	}
	if err := Configure(""); err != nil || enabled.Load() {
		t.Fatal("empty spec must disable")
	}
}
