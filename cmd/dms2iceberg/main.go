// Command dms2iceberg turns AWS DMS change records on a Kinesis stream into Apache Iceberg tables.
//
// Subcommands:
//
//	run      consume the stream and merge changes into Iceberg (the service)
//	demo     start local emulators' endpoints from the environment, generate traffic and run
//	gen      write a generated DMS workload to a stream and its expected final state to a file
//	verify   compare Iceberg tables with an expected-state file
//	status   print per shard (owner, checkpoint, committed watermark, lag) and per table
//	         (last commit, rows, files, deletes) what the service has done
//	decode   print the normalised change events of DMS JSON read from stdin
//
// This package is the only place that reads the environment, wires components together and
// handles signals.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: dms2iceberg <command> [flags]

commands:
  run      consume the Kinesis stream and merge DMS changes into Iceberg tables
  demo     run the service with generated demo traffic against local emulators
  gen      write a generated DMS workload to a stream and the expected final state to a file
  verify   compare Iceberg tables with an expected-state file (exit 1 on any difference)
  status   per shard: owner, checkpoint, committed watermark, lag; per table: last commit, rows, deletes
  decode   read DMS JSON from stdin and print the normalised change events

Run 'dms2iceberg <command> -h' for the flags of a command.
`

// commands maps each subcommand to its entry point. Each returns when its work is done or ctx
// is cancelled.
var commands = map[string]func(ctx context.Context, args []string) error{}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "-h" || name == "--help" || name == "help" {
		fmt.Print(usage)
		return
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "dms2iceberg: unknown command %q\n\n%s", name, usage)
		os.Exit(2)
	}
	ctx, stop := signalContext()
	defer stop()
	if err := cmd(ctx, os.Args[2:]); err != nil {
		var ec exitCode
		if errors.As(err, &ec) {
			os.Exit(int(ec))
		}
		fmt.Fprintf(os.Stderr, "dms2iceberg %s: %v\n", name, err)
		os.Exit(1)
	}
}

// exitCode lets a command choose its exit status after printing its own explanation.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// signalContext is cancelled by the first SIGINT or SIGTERM; a second one exits at once.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	stopped := make(chan struct{})
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case <-ch:
			cancel()
		case <-stopped:
			return
		}
		select {
		case s := <-ch:
			fmt.Fprintf(os.Stderr, "dms2iceberg: second %s, exiting now\n", s)
			os.Exit(130)
		case <-stopped:
		}
	}()
	return ctx, func() { signal.Stop(ch); close(stopped); cancel() }
}
