package systemd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnitOf(t *testing.T) {
	for cg, want := range map[string]string{
		"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1_2.slice": "kubepods-besteffort-pod1_2.slice",
		"/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab12.scope":              "cri-containerd-ab12.scope",
		"/kubepods.slice/kubepods-besteffort.slice/":                                 "kubepods-besteffort.slice",
		"/kubepods/besteffort/pod1/ab12":                                             "",
		"/kubepods-besteffort-pod1.slice:cri-containerd:ab12":                        "",
		"/system.slice/containerd.service":                                           "",
		"/":                                                                          "",
		"/.slice":                                                                    "",
		"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/x\\x2d.scope": "",
	} {
		got, ok := UnitOf(cg)
		if got != want || ok != (want != "") {
			t.Errorf("UnitOf(%q) = %q, %v; want %q", cg, got, ok, want)
		}
	}
}

func TestWeightProperty(t *testing.T) {
	if WeightProperty("cpu.weight") != CPUWeight || WeightProperty("cpu.shares") != CPUShares || WeightProperty("cpu.max") != "" {
		t.Error("weight files map to CPUWeight and CPUShares only")
	}
}

// TestDetect builds the two things Detect looks at beneath a fake host
// root, one at a time.
func TestDetect(t *testing.T) {
	root := t.TempDir()
	if n := Detect(root); n.Units || !strings.Contains(n.Why, "systemd is not running") {
		t.Errorf("no systemd: %+v", n)
	}
	if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	if n := Detect(root); n.Units || !strings.Contains(n.Why, "bus is not reachable") {
		t.Errorf("no bus: %+v", n)
	}
	// The bus alone (a container that mounts only the bus's directory):
	// OpenNode asks systemd on it.
	bare := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bare, "run/dbus"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bare, BusSocket), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if n := Detect(bare); !n.Units || n.Socket != filepath.Join(bare, BusSocket) {
		t.Errorf("the bus alone: %+v", n)
	}
	if err := os.MkdirAll(filepath.Join(root, "run/dbus"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, BusSocket), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n := Detect(root)
	if !n.Units || n.Socket != filepath.Join(root, BusSocket) {
		t.Errorf("systemd node: %+v", n)
	}
}
