// Package buildinfo says which cgwarden is running: its module version,
// the VCS commit it was built from, and the Go version, as the Go
// toolchain stamped them into the binary (runtime/debug.ReadBuildInfo).
// `cgwarden version` prints it and serve exports it as
// cgwarden_build_info, so a bug report and a metrics dashboard both name
// the build.
package buildinfo

import (
	"cmp"
	"runtime/debug"
)

// Info is what the binary knows about its own build. Unknown fields are
// "unknown" (a binary built without module support or VCS stamping, e.g.
// `go build -buildvcs=false` or a test binary), never empty.
type Info struct {
	// Version is the main module's version: a tag (v1.2.3) or pseudo
	// version when installed with `go install ...@version`, "(devel)" when
	// built from a checkout.
	Version string `json:"version"`
	// Revision is the VCS commit, with Modified set when the tree had
	// uncommitted changes.
	Revision string `json:"revision"`
	Modified bool   `json:"modified,omitempty"`
	// Time is the commit's time (RFC 3339), "unknown" when not stamped.
	Time      string `json:"time"`
	GoVersion string `json:"goVersion"`
}

const unknown = "unknown"

// Get reads the running binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: unknown, Revision: unknown, Time: unknown, GoVersion: unknown}
	}
	return FromBuildInfo(bi)
}

// FromBuildInfo reads what Get reads from a given debug.BuildInfo.
func FromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: cmp.Or(bi.Main.Version, unknown), Revision: unknown, Time: unknown, GoVersion: cmp.Or(bi.GoVersion, unknown)}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// Commit is the revision as people quote it: the first 12 hex digits,
// with "-dirty" when the tree had uncommitted changes.
func (in Info) Commit() string {
	c := in.Revision
	if len(c) > 12 && c != unknown {
		c = c[:12]
	}
	if in.Modified {
		c += "-dirty"
	}
	return c
}

// String is the one line `cgwarden --version` prints.
func (in Info) String() string {
	s := in.Version + " (commit " + in.Commit()
	if in.Time != unknown {
		s += ", " + in.Time
	}
	return s + ", " + in.GoVersion + ")"
}
