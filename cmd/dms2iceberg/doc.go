// Command dms2iceberg turns AWS DMS change records on a Kinesis stream into Apache Iceberg tables.
//
// This package is the only place that reads the environment, wires components together and
// handles signals. It owns, one concept per file:
//
//	main.go      the process: signals, exit
//	cli.go       the command table (name, summary, entry point), the usage built from it, and
//	             exitStatus, the one place that maps a command's error to its exit status
//	             (0 success and --help, 1 failure, 2 usage error)
//	flags.go     the preamble every command starts from: its flag set, --config (default
//	             $DMS2ICEBERG_CONFIG) and loading the configuration
//	config.go    the service configuration (YAML over defaults, environment overrides); it
//	             embeds sink.Config and consumer.Config
//	run.go       `run` and serve, which wires the service
//	pipeline.go  the start and the two-phase stop of the running service
//	demo.go, gen.go, verify.go, status.go, maintain.go, dlq.go, decode.go, version.go
//	             the other commands
//	http.go, metrics.go, hook.go, logging.go, tableenv.go
//	             the operations surface, Prometheus metrics, the post-commit hook, logging and
//	             the per-table environment overrides
//
// Concurrency: a command runs on the main goroutine and owns every goroutine it starts; serve's
// goroutines (sink, consumer, ops server, hook) are started and waited for by pipeline.run. The
// first SIGINT or SIGTERM cancels the command's context; a second one exits at once.
package main
