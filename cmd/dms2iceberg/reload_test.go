package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// reload prints the DMS steps for the table and refuses to act: exit status 1, nothing read or
// written; a missing or malformed --table is a usage error.
func TestReloadPrintsTheDMSStepsAndRefuses(t *testing.T) {
	var guide bytes.Buffer
	printReloadGuide(&guide, "shop", "customers", "arn:aws:dms:eu-west-1:1:task:X")
	for _, want := range []string{"aws dms reload-tables --replication-task-arn arn:aws:dms:eu-west-1:1:task:X",
		"SchemaName=shop,TableName=customers", "Reload table data", "not done here"} {
		if !strings.Contains(guide.String(), want) {
			t.Errorf("guide lacks %q:\n%s", want, guide.String())
		}
	}
	var stdout, stderr bytes.Buffer
	// The guide goes to the process's stdout; only the exit status is checked here.
	if got := execute(context.Background(), []string{"reload", "--table", "shop.customers"}, &stdout, &stderr); got != 1 {
		t.Errorf("reload exit status %d, want 1 (refused)", got)
	}
	for _, args := range [][]string{{"reload"}, {"reload", "--table", "customers"}} {
		stderr.Reset()
		if got := execute(context.Background(), args, &stdout, &stderr); got != 2 || !strings.Contains(stderr.String(), "SCHEMA.TABLE") {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming SCHEMA.TABLE", args, got, stderr.String())
		}
	}
}
