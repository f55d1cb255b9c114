package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for name, c := range map[string]struct {
		bi   debug.BuildInfo
		want string
	}{
		"release": {debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "415f72c0b36432a5c97d950280fd74e1084d9ee1"}, {Key: "vcs.time", Value: "2026-11-30T11:00:00Z"}, {Key: "vcs.modified", Value: "false"}}},
			"v0.3.0 (commit 415f72c0b364, 2026-11-30T11:00:00Z, go1.26.8)"},
		"dirty checkout": {debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "415f72c0b36432a5c97d950280fd74e1084d9ee1"}, {Key: "vcs.modified", Value: "true"}}},
			"(devel) (commit 415f72c0b364-dirty, go1.26.8)"},
		"nothing stamped": {debug.BuildInfo{}, "unknown (commit unknown, unknown)"},
	} {
		if got := FromBuildInfo(&c.bi).String(); got != c.want {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
}

// The test binary has build information (Go stamps every binary); its
// Go version is the toolchain's.
func TestGet(t *testing.T) {
	in := Get()
	if in.GoVersion == "" || in.GoVersion == unknown || in.Version == "" {
		t.Errorf("%+v", in)
	}
}
