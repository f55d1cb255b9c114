package lab

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// The configuration files up writes, for a fixed directory and binaries:
// golden files (go test -update rewrites them).
func TestConfigsGolden(t *testing.T) {
	l := Lab{Dir: "/var/lib/cgwarden-cluster"}
	c := Config{Runc: "/usr/sbin/runc", Misplace: "/var/cache/cgwarden-cluster/misplace-x", Node: "localhost", Ports: DefaultPorts}
	files, err := l.configs(c, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("%d files, want 3 (CNI, containerd, kubelet)", len(files))
	}
	for name, b := range files {
		golden := filepath.Join("testdata", strings.ReplaceAll(name, "/", "_")+".golden")
		if *update {
			if err := os.WriteFile(golden, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != string(want) {
			t.Errorf("%s differs from %s:\n%s", name, golden, b)
		}
	}
}

// The host's facts reach the files: containerd clamps pods' OOM scores
// when it cannot lower them, and the kubelet fails on cgroup v1 only when
// told to.
func TestConfigsFollowTheHost(t *testing.T) {
	l := Lab{Dir: "/d"}
	c := Config{Ports: DefaultPorts}
	for _, tc := range []struct {
		cap, v2     bool
		restrict    string
		failCgroup1 string
	}{{true, false, "restrict_oom_score_adj = false", "failCgroupV1: false"}, {false, true, "restrict_oom_score_adj = true", "failCgroupV1: true"}} {
		files, err := l.configs(c, tc.cap, tc.v2)
		if err != nil {
			t.Fatal(err)
		}
		if s := string(files["containerd/config.toml"]); !strings.Contains(s, tc.restrict) {
			t.Errorf("CAP_SYS_RESOURCE %v: containerd's config lacks %q", tc.cap, tc.restrict)
		}
		if s := string(files["kubelet/config.yaml"]); !strings.Contains(s, tc.failCgroup1) {
			t.Errorf("v2 %v: the kubelet's config lacks %q", tc.v2, tc.failCgroup1)
		}
	}
}

func TestPreflightFindsATakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	err = Preflight(Ports{APIServer: port})
	if want := fmt.Sprintf("port %d is in use", port); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Preflight with port %d taken: %v, want %q", port, err, want)
	}
}

func TestPreflightFindsAContainerd(t *testing.T) {
	// A process whose executable is named containerd, as another
	// containerd's would be.
	exe := filepath.Join(t.TempDir(), "containerd")
	b, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	err = Preflight(Ports{})
	if err == nil || !strings.Contains(err.Error(), "a containerd runs already") || !slices.Contains(strings.Fields(strings.NewReplacer("(", " ", ")", " ", ";", " ").Replace(err.Error())), strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("Preflight with %s (pid %d) running: %v, want it named", exe, cmd.Process.Pid, err)
	}
}
