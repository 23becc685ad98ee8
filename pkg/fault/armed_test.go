//go:build faults

package fault

import (
	"strings"
	"testing"
)

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

// With the faults tag the environment arms the points.
func TestFaultsTagReadsEnv(t *testing.T) {
	if !Enabled {
		t.Fatal("Enabled is false in a faults build")
	}
	var killed []string
	kill = func(p string) { killed = append(killed, p) }
	t.Cleanup(func() { _ = Configure("") })
	t.Setenv(EnvVar, "after-decode@1")
	if err := ConfigureFromEnv(); err != nil {
		t.Fatal(err)
	}
	Hit(AfterDecode)
	if len(killed) != 1 {
		t.Fatalf("killed %v, want [after-decode]", killed)
	}
	t.Setenv(EnvVar, "nope@1")
	if err := ConfigureFromEnv(); err == nil || !strings.Contains(err.Error(), EnvVar) {
		t.Fatalf("bad spec: %v", err)
	}
}
