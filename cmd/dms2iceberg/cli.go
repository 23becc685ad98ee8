package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// command is one subcommand: its name, the one-line summary help lists, and its entry point,
// which returns when its work is done or ctx is cancelled. The entry point reports how it ended
// through its error only; exitStatus turns that into the exit status.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

// commands is the command table; help lists it in this order.
var commands = []command{
	{"run", "consume the Kinesis stream and merge DMS changes into Iceberg tables", runService},
	{"demo", "run the service with generated demo traffic against local emulators", runDemo},
	{"gen", "write a generated DMS workload to a stream and the expected final state to a file", runGen},
	{"verify", "compare Iceberg tables with an expected-state file (exit 1 on any difference)", runVerify},
	{"status", "per shard: owner, checkpoint, committed watermark, lag; per table: last commit, complete-through, rows, deletes", runStatus},
	{"cut", "print a consistent cut: per table the first snapshot that holds every change that arrived by a time", runCut},
	{"maintain", "compact, expire snapshots, rewrite manifests and remove orphan files now", runMaintain},
	{"reload", "print how to make DMS reload a table (the service replaces the table's content); does nothing itself", runReload},
	{"dlq", "list or replay the dead letters (records the service could not apply)", runDLQ},
	{"decode", "read DMS JSON from stdin and print the normalised change events", runDecode},
	{"config", "check: validate the configuration and print it with defaults filled in, secrets redacted", runConfig},
	{"version", "print the version, VCS revision and Go version of this build", runVersion},
}

// lookupCommand returns the command of the table named name, or nil.
func lookupCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// mainUsage is the text of `dms2iceberg --help`, built from the command table.
func mainUsage() string {
	var b strings.Builder
	b.WriteString("usage: dms2iceberg <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(&b, "  %-9s %s\n", "help", "print this text; 'help <command>' prints the usage of a command")
	b.WriteString("\nRun 'dms2iceberg <command> --help' for the flags of a command.\n" +
		"Exit status: 0 success (and --help), 1 failure, 2 usage error.\n")
	return b.String()
}

// execute runs the command line args (without the program name) and returns the exit status.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage())
		return 2
	}
	name := args[0]
	switch name {
	case "help":
		if len(args) > 1 {
			return execute(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, mainUsage())
		return 0
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, mainUsage())
		return 0
	case "-version", "--version":
		name, args = "version", append([]string{"version"}, args[1:]...)
	}
	cmd := lookupCommand(name)
	if cmd == nil {
		fmt.Fprintf(stderr, "dms2iceberg: unknown command %q\n\n%s", name, mainUsage())
		return 2
	}
	return exitStatus(name, cmd.run(ctx, args[1:]), stdout, stderr)
}

// exitStatus is the one place that decides the exit status of a command from its error: 0 for
// success and for a help request (the usage goes to stdout), 2 for a usage error, 1 for any
// failure (printed, unless the command has explained it already).
func exitStatus(name string, err error, stdout, stderr io.Writer) int {
	var help *helpRequest
	var usage *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		help.print(stdout)
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "dms2iceberg %s: %v\nRun 'dms2iceberg %s --help' for usage.\n", name, usage.err, name)
		return 2
	case errors.Is(err, errExplained):
		return 1
	default:
		fmt.Fprintf(stderr, "dms2iceberg %s: %v\n", name, err)
		return 1
	}
}

// helpRequest is returned by a command asked for --help or -h; print writes its usage.
type helpRequest struct{ print func(w io.Writer) }

func (*helpRequest) Error() string { return "help requested" }

// usageError is a command line the command cannot run: an unknown flag, a bad flag value, a
// missing required flag or an unexpected argument.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usageErrorf returns a usageError with the formatted message.
func usageErrorf(format string, a ...any) error {
	return &usageError{err: fmt.Errorf(format, a...)}
}

// exitCode is a failure the command has already explained on its output (verify's differences,
// decode's undecodable messages, ...); exitStatus prints nothing more for it.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// errExplained is the error of a command that failed and printed why.
const errExplained = exitCode(1)
