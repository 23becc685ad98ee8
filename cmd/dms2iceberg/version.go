package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

const versionUsage = `usage: dms2iceberg version [--json]

Prints the module version of this build, the VCS revision it was built from (with its time, and
"modified" when the working tree had uncommitted changes) and the Go version.

flags:
`

func runVersion(_ context.Context, args []string) error {
	fs := newFlags("version", versionUsage)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.parse(args); err != nil {
		return err
	}
	info, _ := debug.ReadBuildInfo()
	return writeVersion(os.Stdout, buildVersion(info), *asJSON)
}

// versionInfo is what `version` prints.
type versionInfo struct {
	Module       string `json:"module"`
	Version      string `json:"version"`
	Revision     string `json:"vcs_revision,omitempty"`
	RevisionTime string `json:"vcs_time,omitempty"`
	Modified     bool   `json:"vcs_modified"`
	GoVersion    string `json:"go_version"`
}

// buildVersion reads the module build info (nil: a binary built without it).
func buildVersion(info *debug.BuildInfo) versionInfo {
	v := versionInfo{Module: "github.com/dms2iceberg/dms2iceberg", Version: "(devel)", GoVersion: runtime.Version()}
	if info == nil {
		return v
	}
	if info.Main.Path != "" {
		v.Module = info.Main.Path
	}
	if info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	if info.GoVersion != "" {
		v.GoVersion = info.GoVersion
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.RevisionTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func writeVersion(w io.Writer, v versionInfo, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	rev := v.Revision
	switch {
	case rev == "":
		rev = "unknown"
	case v.Modified:
		rev += " (modified)"
	}
	if v.RevisionTime != "" {
		rev += " " + v.RevisionTime
	}
	_, err := fmt.Fprintf(w, "dms2iceberg %s\n  module    %s\n  revision  %s\n  go        %s\n", v.Version, v.Module, rev, v.GoVersion)
	return err
}
