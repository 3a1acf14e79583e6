package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version, when set at link time, is the version sombus reports:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/sombus
//
// Otherwise it is read from the build information: the module's version
// for `go install …@v1.2.3`, "devel" for a build from a checkout, with the
// commit the go command recorded.
var version string

// versionOf is the version to report: override when set, else the one in
// bi (ok is ReadBuildInfo's second result).
func versionOf(override string, bi *debug.BuildInfo, ok bool) string {
	if override != "" {
		return override
	}
	if !ok || bi == nil {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return fmt.Sprintf("%s (commit %s%s)", v, rev, modified)
}

// setVersion gives root its --version flag and `version` command.
func setVersion(root *cobra.Command) {
	bi, ok := debug.ReadBuildInfo()
	v := versionOf(version, bi, ok)
	root.Version = v
	root.SetVersionTemplate("sombus {{.Version}}\n")
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version of sombus",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "sombus %s\nbuilt with %s for %s/%s\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	})
}
