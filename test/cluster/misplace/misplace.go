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

// Misplace is the pod annotation that selects a pod's containers for
// misplacing when the wrapper runs with SelectEnv=annotated: "true" does.
// containerd copies it into the OCI specs of the pod's sandbox and
// containers only when the runtime handler lists it in pod_annotations.
const Misplace = "cgwarden.io/misplace"

// SelectEnv names the variable that narrows what the wrapper misplaces.
// Unset, every app container it runs is misplaced (the cluster lane's
// "misplace" handler, chosen by RuntimeClass). "annotated": only those of
// pods annotated Misplace=true; every other container passes through
// untouched. The systemd node guest (scripts/vmtest --node) needs it: there
// the wrapper is containerd's default handler, because a standalone
// kubelet has no RuntimeClasses to choose another.
const SelectEnv = "CGWARDEN_MISPLACE_SELECT"

// Options is how the wrapper was asked to choose.
type Options struct {
	// AnnotatedOnly misplaces only pods annotated Misplace=true.
	AnnotatedOnly bool
}

// OptionsFromEnv reads SelectEnv; any value but "" and "annotated" is an
// error, so that a typo does not misplace every container of a node.
func OptionsFromEnv() (Options, error) {
	switch v := os.Getenv(SelectEnv); v {
	case "":
		return Options{}, nil
	case "annotated":
		return Options{AnnotatedOnly: true}, nil
	default:
		return Options{}, fmt.Errorf("%s=%q: want \"\" (every app container) or \"annotated\" (pods annotated %s: \"true\")", SelectEnv, v, Misplace)
	}
}

// Rewrite returns the OCI config doc with linux.cgroupsPath misplaced when
// it is an app container's, or the sandbox's of a pod annotated
// MisplaceSandbox (with o.AnnotatedOnly, of a pod annotated Misplace as
// well). literal reports that the wrapper stands for a literal-minded
// runtime for this container: its path, misplaced or as cgwarden's NRI
// plugin set it, is to be created as the directory it names, so runc is to
// run without --systemd-cgroup. Any other config (another sandbox, a
// container not selected, a config not from the CRI plugin) is returned as
// it was, with literal false. Every other field is kept as it was
// (numbers exactly).
func Rewrite(doc []byte, o Options) (out []byte, literal bool, err error) {
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
	if selected, _ := ann[Misplace].(string); o.AnnotatedOnly && selected != "true" {
		return doc, false, nil
	}
	linux, ok := spec["linux"].(map[string]any)
	if !ok {
		return nil, false, errors.New("config.json: an app container without a linux section")
	}
	p, _ := linux["cgroupsPath"].(string)
	if placed, _ := ann[nriPlaced].(string); placed != "" && placed == p {
		// cgwarden's NRI plugin chose this path (see nriPlaced).
		return doc, true, nil
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
// over the old one, with its mode) and says whether runc is to take the
// container's path literally (Rewrite).
func misplaceBundle(bundle string, o Options) (literal bool, err error) {
	name := filepath.Join(bundle, "config.json")
	doc, err := os.ReadFile(name)
	if err != nil {
		return false, err
	}
	out, literal, err := Rewrite(doc, o)
	if err != nil || bytes.Equal(out, doc) {
		return literal, err
	}
	st, err := os.Stat(name)
	if err != nil {
		return false, err
	}
	tmp := name + ".misplace"
	if err := os.WriteFile(tmp, out, st.Mode().Perm()); err != nil {
		return false, err
	}
	return literal, os.Rename(tmp, name)
}

// withoutSystemd returns runc's arguments without the global flag
// --systemd-cgroup, which containerd's runc shim passes when the handler
// has SystemdCgroup = true: the runtime the wrapper stands for has no
// systemd support (youki as runwasi drives it), so runc's cgroupfs manager
// takes the path as one directory. Only create and run are given this; the
// later commands (start, kill, delete, update) find the manager runc chose
// in the container's saved state whatever their flags say.
func withoutSystemd(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return append(out, args[i:]...) // the command and its own flags
		}
		if a == "--systemd-cgroup" || a == "--systemd-cgroup=true" {
			continue
		}
		out = append(out, a)
		if valueFlags[a] && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
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
