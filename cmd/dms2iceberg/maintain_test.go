package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"testing"

	"github.com/dms2iceberg/dms2iceberg/pkg/workload"
)

// captureStdout runs fn with os.Stdout redirected and returns what it wrote.
func captureStdout(t *testing.T, fn func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	ferr := fn()
	os.Stdout = old
	_ = w.Close()
	return string(<-done), ferr
}

// maintain --json reports every table as one JSON object.
func TestMaintainJSON(t *testing.T) {
	g := workload.New(workload.Config{Seed: 3, LoadRows: 20, Changes: 100})
	exp, err := g.Expected()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeTables(t, dir, g, nil, nil)
	cfgPath, _ := writeConfigAndExpected(t, dir, exp)
	out, err := captureStdout(t, func() error {
		return runMaintain(context.Background(), []string{"--config", cfgPath, "--json", "shop.customers"})
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rep maintainReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if !rep.OK || rep.Failed != 0 || len(rep.Tables) != 1 || rep.Tables[0].Table != "shop.customers" ||
		rep.Tables[0].Report == nil || rep.Tables[0].Report.SnapshotsBefore < 1 {
		t.Fatalf("report %+v\n%s", rep, out)
	}
}
