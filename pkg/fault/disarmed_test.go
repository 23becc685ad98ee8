//go:build !faults

package fault

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Without the faults tag an armed spec kills nothing and the environment is never read.
func TestWithoutTagFaultsAreIgnored(t *testing.T) {
	if Enabled {
		t.Fatal("Enabled in a build without the faults tag")
	}
	t.Setenv(EnvVar, "after-commit@1,nope@x")
	if err := ConfigureFromEnv(); err != nil {
		t.Fatalf("ConfigureFromEnv read %s: %v", EnvVar, err)
	}
	if err := Configure("after-commit@1"); err != nil {
		t.Fatal(err)
	}
	for _, p := range Points {
		Hit(p) // would SIGKILL the test process in a faults build
	}
	if err := Configure("nope@1"); err == nil {
		t.Error("Configure still validates its spec")
	}
}

// The process check: a child test process with DMS2ICEBERG_FAULTS armed at the first hit
// survives every point.
func TestWithoutTagProcessSurvivesArmedEnv(t *testing.T) {
	if os.Getenv("FAULT_CHILD") == "1" {
		if err := ConfigureFromEnv(); err != nil {
			os.Exit(3)
		}
		for _, p := range Points {
			Hit(p)
		}
		os.Stdout.WriteString("survived\n")
		os.Exit(0)
	}
	spec := strings.Join(Points, "@1,") + "@1"
	cmd := exec.Command(os.Args[0], "-test.run=^TestWithoutTagProcessSurvivesArmedEnv$")
	cmd.Env = append(os.Environ(), "FAULT_CHILD=1", EnvVar+"="+spec)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "survived") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
