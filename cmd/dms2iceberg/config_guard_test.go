package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// §11 item 7 of the KCL audit (E10): LATEST loses the records written to a child shard before
// it is leased. The configuration refuses it, with an error that names the field.
func TestConfigRefusesLATEST(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte("stream: s\ninitial_position: LATEST\ndata_dir: "+dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "initial_position") || !strings.Contains(err.Error(), "LATEST") {
		t.Fatalf("Validate() = %v, want an initial_position error refusing LATEST", err)
	}
	cfg.InitialPosition = "TRIM_HORIZON"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("TRIM_HORIZON refused: %v", err)
	}
}
