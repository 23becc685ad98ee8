package main

import (
	"os"
	"testing"
)

// TestMain gives the tests a region and keeps them off the instance-metadata endpoint: the
// configuration no longer defaults the region (region.go), and a test that needs another
// environment sets it with t.Setenv.
func TestMain(m *testing.M) {
	_ = os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	if os.Getenv("AWS_REGION") == "" && os.Getenv("AWS_DEFAULT_REGION") == "" {
		_ = os.Setenv("AWS_REGION", "us-east-1")
	}
	os.Exit(m.Run())
}
