// Package fault owns the named fault points of the crash-anywhere tests: places in the pipeline
// where a test can have the process killed (SIGKILL, no cleanup) to prove that a crash there
// loses and duplicates nothing.
//
// Fault points exist only in binaries built with the faults build tag (go build -tags faults;
// the integration harness builds its binary so). Without the tag (every production build) Hit
// is an empty function the compiler removes, Enabled is false, ConfigureFromEnv does not read
// the environment and Configure only validates its spec. With the tag, points cost one atomic
// load when no fault is configured.
//
// A spec is a comma-separated list of NAME@N (kill at the Nth time the point is reached) or
// NAME%P (kill with probability P per hit, 0 < P <= 1), for example
// "after-commit@3,after-decode%0.001". cmd reads it from DMS2ICEBERG_FAULTS (ConfigureFromEnv), in
// faults builds only.
//
// Concurrency: Hit may be called from any goroutine.
package fault
