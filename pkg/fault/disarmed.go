//go:build !faults

package fault

// Enabled reports whether this binary was built with fault points (the faults build tag). It is
// false: every point is a no-op the compiler removes, and DMS2ICEBERG_FAULTS is never read.
const Enabled = false

// ConfigureFromEnv does nothing without the faults build tag: the environment is not read.
func ConfigureFromEnv() error { return nil }

// Configure validates a spec and arms nothing without the faults build tag.
func Configure(spec string) error {
	_, err := parseSpec(spec)
	return err
}

// Hit does nothing without the faults build tag.
func Hit(string) {}
