package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// runc's global flags that take a value (runc --help, 1.1 to 1.3): the
// word after them is not the command.
var valueFlags = map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true, "--rootless": true}

// bundleOf returns the bundle of a `runc create` or `runc run` command
// line (its --bundle/-b, else the working directory, as runc does), and
// false for every other command.
func bundleOf(args []string) (string, bool) {
	cmd := -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			cmd = i
			break
		}
		if valueFlags[a] {
			i++ // its value
		}
	}
	if cmd < 0 || (args[cmd] != "create" && args[cmd] != "run") {
		return "", false
	}
	rest := args[cmd+1:]
	for i, a := range rest {
		switch {
		case (a == "--bundle" || a == "-b") && i+1 < len(rest):
			return rest[i+1], true
		case strings.HasPrefix(a, "--bundle="):
			return strings.TrimPrefix(a, "--bundle="), true
		case strings.HasPrefix(a, "-b="):
			return strings.TrimPrefix(a, "-b="), true
		}
	}
	return ".", true
}

var (
	// The kubelet's cgroupfs path of a container: /kubepods/pod<uid>/<id>
	// (Guaranteed) or /kubepods/<qos>/pod<uid>/<id>; static pods' UIDs are
	// 32 hex digits without dashes.
	cgroupfsRe = regexp.MustCompile(`^/kubepods(?:/(burstable|besteffort))?/pod([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})/([0-9a-f]{64})$`)
	// The systemd form containerd gives with SystemdCgroup: slice:prefix:id.
	systemdRe = regexp.MustCompile(`^/?([^:/]+\.slice):([^:/]+):([^:/]+)$`)
)

// Misplaced is where the runwasi shim put a container whose kubelet
// cgroupsPath is p: the systemd name "<slice>:cri-containerd:<id>" as a
// literal directory at the root of each hierarchy.
func Misplaced(p string) (string, error) {
	if m := cgroupfsRe.FindStringSubmatch(p); m != nil {
		slice := "kubepods"
		if m[1] != "" {
			slice += "-" + m[1]
		}
		slice += "-pod" + strings.ReplaceAll(m[2], "-", "_") + ".slice"
		return "/" + slice + ":cri-containerd:" + m[3], nil
	}
	if m := systemdRe.FindStringSubmatch(p); m != nil {
		return "/" + m[1] + ":" + m[2] + ":" + m[3], nil
	}
	return "", fmt.Errorf("cgroupsPath %q is neither the kubelet's cgroupfs path (/kubepods/<qos>/pod<uid>/<id>) nor systemd's slice:prefix:id", p)
}

// containerType is the CRI annotation that tells a pod's sandbox from its
// app containers (containerd 1.6 and 2.x).
const containerType = "io.kubernetes.cri.container-type"

// nriPlaced is the annotation cgwarden's NRI plugin (cgwarden nri) puts on
// a container whose cgroupsPath it set, with the path as its value. This
// lane's node uses the cgroupfs driver, where containerd already hands the
// runtime the kubelet's path, so the wrapper plays a systemd node: there
// containerd would have handed slice:prefix:id, which the shim makes a
// literal directory of — unless an NRI plugin replaced it with the absolute
// path, which the shim then creates where it says. A path the plugin set
// is therefore kept as it is (the lane's test of the plugin,
// TestNRIPluginPlacesMisplacingRuntime, relies on it).
const nriPlaced = "cgwarden.io/nri-cgroups-path"

// MisplaceSandbox is the pod annotation that has the wrapper misplace the
// pod's sandbox (pause) cgroup too, as a runwasi-style shim can (issue
// 20): "true" does. containerd copies it into the OCI specs of the pod's
// sandbox and containers only when the runtime handler lists it in
// pod_annotations (scripts/cluster's misplace handler does).
const MisplaceSandbox = "cgwarden.io/misplace-sandbox"

// Rewrite returns the OCI config doc with linux.cgroupsPath misplaced when
// it is an app container's, or the sandbox's of a pod annotated
// MisplaceSandbox; changed is false for any other sandbox, or a config
// that is not from the CRI plugin. Every other field is kept as it was
// (numbers exactly).
func Rewrite(doc []byte) (out []byte, changed bool, err error) {
	var spec map[string]any
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	if err := d.Decode(&spec); err != nil {
		return nil, false, fmt.Errorf("config.json: %w", err)
	}
	ann, _ := spec["annotations"].(map[string]any)
	t, _ := ann[containerType].(string)
	sandbox, _ := ann[MisplaceSandbox].(string)
	if t != "container" && (t != "sandbox" || sandbox != "true") {
		return doc, false, nil
	}
	linux, ok := spec["linux"].(map[string]any)
	if !ok {
		return nil, false, errors.New("config.json: an app container without a linux section")
	}
	p, _ := linux["cgroupsPath"].(string)
	if placed, _ := ann[nriPlaced].(string); placed != "" && placed == p {
		// cgwarden's NRI plugin chose this path (see nriPlaced).
		return doc, false, nil
	}
	to, err := Misplaced(p)
	if err != nil {
		return nil, false, err
	}
	linux["cgroupsPath"] = to
	out, err = json.Marshal(spec)
	return out, true, err
}

// misplaceBundle rewrites bundle/config.json in place (a new file renamed
// over the old one, with its mode).
func misplaceBundle(bundle string) error {
	name := filepath.Join(bundle, "config.json")
	doc, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	out, changed, err := Rewrite(doc)
	if err != nil || !changed {
		return err
	}
	st, err := os.Stat(name)
	if err != nil {
		return err
	}
	tmp := name + ".misplace"
	if err := os.WriteFile(tmp, out, st.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// realRunc is the runc this wrapper stands in front of.
func realRunc() (string, error) {
	if p := os.Getenv("CGWARDEN_MISPLACE_RUNC"); p != "" {
		return p, nil
	}
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p, err := exec.LookPath(filepath.Join(dir, "runc"))
		if err != nil {
			continue
		}
		if r, _ := filepath.EvalSymlinks(p); r != self {
			return p, nil
		}
	}
	return "", errors.New("no runc found: set CGWARDEN_MISPLACE_RUNC or put runc on PATH")
}
