// Package integration holds the end-to-end tests: they build the real dms2iceberg binary, run it
// as a subprocess against the local emulators (Kinesis, DynamoDB, S3) and check what lands in the
// Iceberg tables.
//
// Everything else in this package is behind the "integration" build tag, so plain
// `go test ./...` does not run it. Run them with the emulators up:
//
//	.ci/emulators.sh up && eval "$(.ci/emulators.sh env)"
//	go test -race -count=1 -tags integration ./integration/...
//
// or let `make test` (everything) or `make test-integration` do it. The helpers are in
// harness.go; a package that uses them should end its test binary with RunTests:
//
//	func TestMain(m *testing.M) { os.Exit(integration.RunTests(m)) }
package integration
