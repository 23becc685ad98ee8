package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// configEnv names the configuration file of every command that reads one, unless --config does.
const configEnv = "DMS2ICEBERG_CONFIG"

// cmdFlags is the preamble every command starts from: its flag set, whose usage is the command's
// header followed by the flags, and, for commands that read the service configuration, the
// shared --config flag (default $DMS2ICEBERG_CONFIG) and its loading. Parse errors and help are
// not printed here: parse returns them, and exitStatus prints them once.
type cmdFlags struct {
	*flag.FlagSet
	configPath *string
	// positional allows arguments after the flags; without it they are a usage error.
	positional bool
}

// newFlags returns the flag set of the command name with the usage text header (ending in a
// line "flags:" or similar; the flags follow it).
func newFlags(name, header string) *cmdFlags {
	f := &cmdFlags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError)}
	f.SetOutput(io.Discard)
	f.Usage = func() {
		fmt.Fprint(f.Output(), header)
		f.PrintDefaults()
	}
	return f
}

// withConfig adds --config, described by help, defaulting to $DMS2ICEBERG_CONFIG.
func (f *cmdFlags) withConfig(help string) *cmdFlags {
	f.configPath = f.String("config", os.Getenv(configEnv), help+" (env "+configEnv+")")
	return f
}

// parse parses args. It returns a *helpRequest for -h/--help and a *usageError for anything the
// flags do not accept, including arguments when the command takes none.
func (f *cmdFlags) parse(args []string) error {
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return f.help()
		}
		return &usageError{err: err}
	}
	if !f.positional && f.NArg() > 0 {
		return usageErrorf("unexpected arguments: %s", strings.Join(f.Args(), " "))
	}
	return nil
}

// help returns the help request that prints this command's usage.
func (f *cmdFlags) help() *helpRequest {
	return &helpRequest{print: func(w io.Writer) {
		f.SetOutput(w)
		f.Usage()
		f.SetOutput(io.Discard)
	}}
}

// hasConfig reports whether a configuration file is named (by --config or the environment).
func (f *cmdFlags) hasConfig() bool { return f.configPath != nil && *f.configPath != "" }

// config loads the service configuration: the file named by --config (none: the defaults) with
// the environment overrides applied.
func (f *cmdFlags) config() (Config, error) {
	path := ""
	if f.configPath != nil {
		path = *f.configPath
	}
	return loadConfig(path)
}

// validConfig is config with the region required (region.go: instance metadata is its last
// source), validated.
func (f *cmdFlags) validConfig(ctx context.Context) (Config, error) {
	cfg, err := f.config()
	if err != nil {
		return cfg, err
	}
	if err := cfg.requireRegion(ctx); err != nil {
		return cfg, fmt.Errorf("invalid configuration: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, nil
}
