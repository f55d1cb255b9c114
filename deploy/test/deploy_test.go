package deploytest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	chartDir = "../helm/cgwarden"
	kustDir  = "../kustomize"
)

// object is one rendered Kubernetes object.
type object map[string]any

func (o object) key() string {
	md, _ := o["metadata"].(map[string]any)
	return fmt.Sprintf("%s/%s/%s", o["kind"], md["namespace"], md["name"])
}

// split parses a multi-document YAML stream into objects, sorted by kind,
// namespace and name.
func split(t *testing.T, stream string) []object {
	t.Helper()
	var out []object
	for _, doc := range strings.Split(stream, "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(doc), "---")) == "" {
			continue
		}
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if len(o) == 0 {
			continue
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// helm renders the chart with values (over its defaults).
func helm(t *testing.T, values map[string]any) []object {
	t.Helper()
	objs, err := helmRender(t, values)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// helmRender renders the chart with values, or says why it refused.
func helmRender(t *testing.T, values map[string]any) ([]object, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "cgwarden", Namespace: "cgwarden-system", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		if strings.HasSuffix(n, ".yaml") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString("\n---\n" + files[n])
	}
	return split(t, b.String()), nil
}

// kustomize builds a kustomization directory.
func kustomize(t *testing.T, dir string) []object {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join(kustDir, dir))
	if err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatal(err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return split(t, string(y))
}

func same(t *testing.T, what string, a, b []object) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d objects against %d: %v / %v", what, len(a), len(b), keys(a), keys(b))
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			ya, _ := yaml.Marshal(a[i])
			yb, _ := yaml.Marshal(b[i])
			t.Errorf("%s: %s differs:\n--- helm\n%s\n--- kustomize\n%s", what, a[i].key(), ya, yb)
		}
	}
}

func keys(os []object) []string {
	var k []string
	for _, o := range os {
		k = append(k, o.key())
	}
	return k
}

func TestHelmLint(t *testing.T) {
	lint := action.NewLint()
	lint.Strict = true
	res := lint.Run([]string{chartDir}, nil)
	for _, e := range res.Errors {
		t.Errorf("helm lint: %v", e)
	}
	for _, m := range res.Messages {
		if m.Severity > 1 { // warnings and errors; INFO (1) is the missing icon
			t.Errorf("helm lint: %s", m)
		}
	}
}

// The chart and the kustomize base render the same objects, observe-only
// and in fix mode; the optional ServiceMonitor too.
func TestChartAndKustomizeAgree(t *testing.T) {
	same(t, "observe-only", helm(t, nil), kustomize(t, "base"))
	rules := []any{"misplaced-container", "size-blind-weights", "besteffort-starvation"}
	same(t, "fix", helm(t, map[string]any{"fix": map[string]any{"rules": rules}}), kustomize(t, "fix"))
	same(t, "fix-cgroup-v1", helm(t, map[string]any{"fix": map[string]any{"rules": rules, "cgroupV1": true}}), kustomize(t, "fix-cgroup-v1"))
	var sm []object
	verified := map[string]any{"enabled": true, "tls": map[string]any{"caSecret": map[string]any{"name": "cgwarden-serving-ca"}, "serverName": "cgwarden.cgwarden-system.svc"}}
	for _, o := range helm(t, map[string]any{"serviceMonitor": verified}) {
		if o["kind"] == "ServiceMonitor" {
			sm = append(sm, o)
		}
	}
	same(t, "servicemonitor", sm, kustomize(t, "servicemonitor"))
	nri := map[string]any{"nri": map[string]any{"enabled": true, "runtimeHandlers": []any{"wasmtime-spin-v2"}}}
	same(t, "nri", helm(t, nri), kustomize(t, "nri"))
	same(t, "node-scoped", helm(t, map[string]any{"metadata": map[string]any{"nodeScoped": true}}), kustomize(t, "node-scoped"))
	same(t, "vm-namespaces", helm(t, map[string]any{"fix": map[string]any{"rules": rules}, "metadata": map[string]any{"vmNamespaces": []any{"vms"}}}), kustomize(t, "vm-namespaces"))
	// With the sizer, a ServiceMonitor for it too (in its namespace).
	sm = nil
	for _, o := range helm(t, map[string]any{"serviceMonitor": verified, "sizer": map[string]any{"enabled": true}}) {
		if o["kind"] == "ServiceMonitor" && o.key() == "ServiceMonitor/cgwarden-sizer/cgwarden-sizer" {
			sm = append(sm, o)
		}
	}
	same(t, "sizer servicemonitor", sm, kustomize(t, "sizer-servicemonitor"))
}

// The agents with cgwarden nri beside them, and only those, relay its
// metrics (--nri-metrics on the plugin's --listen) and carry the pod
// annotation the ServiceMonitor's and scrape.yaml's cgwarden-nri job keeps.
func TestNRIMetricsRelayed(t *testing.T) {
	for name, objs := range map[string][]object{"chart nri": helm(t, map[string]any{"nri": map[string]any{"enabled": true, "runtimeHandlers": []any{"x"}}}), "kustomize nri": kustomize(t, "nri"),
		"chart": helm(t, nil), "kustomize base": kustomize(t, "base")} {
		withNRI := strings.Contains(name, "nri")
		for _, o := range objs {
			if o["kind"] != "DaemonSet" {
				continue
			}
			tmpl := o["spec"].(map[string]any)["template"].(map[string]any)
			md, _ := tmpl["metadata"].(map[string]any)
			ann, _ := md["annotations"].(map[string]any)
			if got := ann["cgwarden.io/nri-metrics"] == "/metrics/nri"; got != withNRI {
				t.Errorf("%s: pod annotation cgwarden.io/nri-metrics %v, want it %v", name, ann["cgwarden.io/nri-metrics"], withNRI)
			}
			cs := tmpl["spec"].(map[string]any)["containers"].([]any)
			var relay, listen string
			for _, a := range cs[0].(map[string]any)["args"].([]any) {
				if v, ok := strings.CutPrefix(a.(string), "--nri-metrics="); ok {
					relay = v
				}
			}
			if len(cs) > 1 {
				for _, a := range cs[1].(map[string]any)["args"].([]any) {
					if v, ok := strings.CutPrefix(a.(string), "--listen="); ok {
						listen = v
					}
				}
			}
			if relay != listen || (relay != "") != withNRI {
				t.Errorf("%s: the agent's --nri-metrics %q, the plugin's --listen %q", name, relay, listen)
			}
		}
	}
}

// nri.enabled adds `cgwarden nri` beside the agent with the runtime's NRI
// socket mounted, the listed handlers and the learned file; the real
// binary accepts its arguments; nothing of it is there by default.
func TestNRIContainer(t *testing.T) {
	for _, o := range helm(t, nil) {
		if y, _ := yaml.Marshal(o); strings.Contains(string(y), "/var/run/nri") {
			t.Errorf("%s mentions /var/run/nri with nri.enabled unset", o.key())
		}
	}
	vals := map[string]any{"nri": map[string]any{"enabled": true, "runtimeHandlers": []any{"spin", "slight"}, "dryRun": true}}
	var spec map[string]any
	for _, o := range helm(t, vals) {
		if o["kind"] == "DaemonSet" {
			spec = o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		}
	}
	cs := spec["containers"].([]any)
	if len(cs) != 2 {
		t.Fatalf("%d containers, want the agent and nri", len(cs))
	}
	c := cs[1].(map[string]any)
	y, _ := yaml.Marshal(spec)
	for _, want := range []string{"mountPath: /var/run/nri", "path: /var/run/nri", "type: DirectoryOrCreate"} {
		if !strings.Contains(string(y), want) {
			t.Errorf("the pod spec lacks %q", want)
		}
	}
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	for _, want := range []string{"nri", "--socket=/var/run/nri/nri.sock", "--runtime-handlers=spin,slight", "--learned-file=/var/lib/cgwarden/nri-handlers", "--lock-dir=/var/lib/cgwarden", "--events", "--dry-run"} {
		if !slices.Contains(args, want) {
			t.Errorf("nri args %v lack %q", args, want)
		}
	}
	for _, set := range [][]string{args, secondArgs(t, kustomize(t, "nri"))} {
		out, err := exec.Command(cgwarden(t), append(set, "--help")...).CombinedOutput()
		if err != nil {
			t.Errorf("cgwarden %s --help: %v\n%s", strings.Join(set, " "), err, out)
		}
	}
}

// What the agent needs is there: host PID, the host's cgroups, /proc and
// CPU list under /host, the journal on the host (fix mode), tolerations
// for every node, system-node-critical, probes on /readyz and /healthz;
// and cgwarden itself accepts the arguments (the real binary parses them).
func TestDaemonSetIsWhatTheAgentNeeds(t *testing.T) {
	var ds object
	for _, o := range helm(t, map[string]any{"fix": map[string]any{"rules": []any{"size-blind-weights"}}, "auth": map[string]any{"enabled": false},
		"listen": map[string]any{"address": "127.0.0.1"}}) {
		if o["kind"] == "DaemonSet" {
			ds = o
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet")
	}
	y, _ := yaml.Marshal(ds)
	text := string(y)
	for _, want := range []string{
		"hostPID: true", "priorityClassName: system-node-critical", "operator: Exists",
		"mountPath: /host/sys/fs/cgroup", "mountPath: /host/proc", "mountPath: /host/sys/devices/system/cpu",
		"path: /var/lib/cgwarden", "path: /readyz", "path: /healthz", "scheme: HTTP\n", "host: 127.0.0.1",
		"--fix=size-blind-weights", "--local-listen=127.0.0.1:9531",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the DaemonSet lacks %q", want)
		}
	}
	if strings.Contains(text, "--authenticate") {
		t.Error("auth.enabled=false still passes --authenticate")
	}
	if strings.Contains(text, "--allow-remote") {
		t.Error("auth.enabled=false still passes --allow-remote")
	}
	spec := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	c := spec["containers"].([]any)[0].(map[string]any)
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	for _, set := range [][]string{args, argsOf(t, kustomize(t, "fix")), argsOf(t, kustomize(t, "base"))} {
		bin := cgwarden(t)
		out, err := exec.Command(bin, append(set, "--help")...).CombinedOutput()
		if err != nil {
			t.Errorf("cgwarden %s --help: %v\n%s", strings.Join(set, " "), err, out)
		}
	}
}

// secondArgs is the args of the DaemonSet's second container.
func secondArgs(t *testing.T, objs []object) []string {
	t.Helper()
	for _, o := range objs {
		if o["kind"] != "DaemonSet" {
			continue
		}
		cs := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
		if len(cs) < 2 {
			t.Fatal("the DaemonSet has one container")
		}
		var out []string
		for _, a := range cs[1].(map[string]any)["args"].([]any) {
			out = append(out, a.(string))
		}
		return out
	}
	t.Fatal("no DaemonSet")
	return nil
}

func argsOf(t *testing.T, objs []object) []string {
	t.Helper()
	return argsOfKind(t, objs, "DaemonSet")
}

// argsOfKind are the first container's arguments of the object of kind.
func argsOfKind(t *testing.T, objs []object, kind string) []string {
	t.Helper()
	for _, o := range objs {
		if o["kind"] != kind {
			continue
		}
		c := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		var out []string
		for _, a := range c["args"].([]any) {
			out = append(out, a.(string))
		}
		return out
	}
	t.Fatalf("no %s", kind)
	return nil
}

// built holds the binaries built (by name), all under builtDir.
var (
	built    = map[string]string{}
	builtDir string
)

// TestMain removes the binaries built (they outlive the test that built
// them: other tests run them too).
func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// cgwarden builds the agent's binary once.
func cgwarden(t *testing.T) string {
	t.Helper()
	bin := binary(t, "cgwarden")
	os.Setenv("CGWARDEN_TEST_BIN", bin)
	return bin
}

// binary builds ./cmd/name once.
func binary(t *testing.T, name string) string {
	t.Helper()
	if bin, ok := built[name]; ok {
		return bin
	}
	if builtDir == "" {
		dir, err := os.MkdirTemp("", "cgwarden-deploy-test")
		if err != nil {
			t.Fatal(err)
		}
		builtDir = dir
	}
	bin := filepath.Join(builtDir, name)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("building %s: %v\n%s", name, err, stderr.String())
	}
	built[name] = bin
	return bin
}

// The sizer: off by default; with sizer.enabled the chart adds exactly the
// objects of the kustomize sizer directory, and leaves the agent's alone.
func TestChartAndKustomizeAgreeOnSizer(t *testing.T) {
	isSizer := func(o object) bool {
		md, _ := o["metadata"].(map[string]any)
		labels, _ := md["labels"].(map[string]any)
		return labels["app.kubernetes.io/name"] == "cgwarden-sizer"
	}
	for _, o := range helm(t, nil) {
		if isSizer(o) {
			t.Errorf("sizer object %s rendered with sizer.enabled unset", o.key())
		}
	}
	var sz, rest []object
	for _, o := range helm(t, map[string]any{"sizer": map[string]any{"enabled": true}}) {
		if isSizer(o) {
			sz = append(sz, o)
		} else {
			rest = append(rest, o)
		}
	}
	// The CA differs per install: each is checked against its own
	// Secret by TestSizerCABundleIsTheSecretsCA, and left out here.
	same(t, "sizer", withoutCA(sz), withoutCA(kustomizeWithCA(t)))
	same(t, "agent beside the sizer", rest, kustomize(t, "base"))
}

// What the sizer's manifests promise: the webhook never blocks pod
// creation (failurePolicy Ignore, 5 s), never sees kube-system or
// cgwarden's namespaces, is called only for pods it may size (match
// conditions), calls /mutate on the Service; RBAC holds pods/resize and
// nothing to write beyond pods/resize, events and its Lease, nothing on
// its webhook configuration (TestRBACRulesArePinned pins every rule); and the
// Deployment runs /cgwarden-sizer (its own binary in the image, not the
// agent's /cgwarden), which accepts the Deployment's arguments.
func TestSizerManifests(t *testing.T) {
	objs := kustomize(t, "sizer")
	byKind := map[string]object{}
	for _, o := range objs {
		byKind[o["kind"].(string)] = o
	}
	y, _ := yaml.Marshal(byKind["MutatingWebhookConfiguration"])
	for _, want := range []string{"failurePolicy: Ignore", "timeoutSeconds: 5", "path: /mutate", "sideEffects: None",
		"operator: NotIn", "- kube-system", "- cgwarden-system", "- cgwarden-sizer", "- CREATE", "- pods",
		"matchConditions:", "'vm.neon.tech/name' in object.metadata.labels", "'cgwarden.io/cpu' in object.metadata.annotations", "o.kind == 'VirtualMachine'"} {
		if !strings.Contains(string(y), want) {
			t.Errorf("webhook configuration lacks %q:\n%s", want, y)
		}
	}
	y, _ = yaml.Marshal(byKind["ClusterRole"])
	for _, want := range []string{"pods/resize", "virtualmachines"} {
		if !strings.Contains(string(y), want) {
			t.Errorf("ClusterRole lacks %q", want)
		}
	}
	for _, bad := range []string{"delete", "'*'", "secrets", "webhookconfigurations"} {
		if strings.Contains(string(y), bad) {
			t.Errorf("ClusterRole holds %q", bad)
		}
	}
	d := byKind["Deployment"]
	c := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if cmd, _ := c["command"].([]any); len(cmd) != 1 || cmd[0] != "/cgwarden-sizer" {
		t.Errorf("the sizer's container runs command %v, want [/cgwarden-sizer]", c["command"])
	}
	// GOMEMLIMIT is the container's memory limit in bytes: a divisor
	// other than 1 (1Mi gives "640") would be read as that many bytes,
	// and the garbage collector would run without end.
	var memLimit map[string]any
	for _, e := range c["env"].([]any) {
		e := e.(map[string]any)
		if e["name"] == "GOMEMLIMIT" {
			vf, _ := e["valueFrom"].(map[string]any)
			memLimit, _ = vf["resourceFieldRef"].(map[string]any)
		}
	}
	if memLimit == nil || memLimit["resource"] != "limits.memory" || memLimit["containerName"] != c["name"] || fmt.Sprint(memLimit["divisor"]) != "1" {
		t.Errorf("the sizer's GOMEMLIMIT is %v, want its container's limits.memory with divisor 1", memLimit)
	}
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	bin := binary(t, "cgwarden-sizer")
	if out, err := exec.Command(bin, append(args, "--help")...).CombinedOutput(); err != nil {
		t.Errorf("cgwarden-sizer %s --help: %v\n%s", strings.Join(args, " "), err, out)
	}
	// The agent's binary has no sizer: `cgwarden sizer` only says where
	// it went (a Deployment left running it fails with that in its log).
	out, err := exec.Command(cgwarden(t), append([]string{"sizer"}, args...)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "run cgwarden-sizer") {
		t.Errorf("cgwarden sizer: %v\n%s", err, out)
	}
}

// sizes.maxPerNamespace is rendered as one --max-size, the same on the
// agent's DaemonSet and the sizer's Deployment (the agent caps the sizes
// it believes, the sizer its requests, alike), in the namespaces' order;
// both binaries accept it; an empty map renders no flag, so the default
// chart stays the kustomize base.
func TestMaxSizeOnAgentAndSizer(t *testing.T) {
	containerArgs := func(objs []object, kind string) []string { return argsOfKind(t, objs, kind) }
	hasMaxSize := func(args []string) string {
		for _, a := range args {
			if strings.HasPrefix(a, "--max-size") {
				return a
			}
		}
		return ""
	}
	bounded := helm(t, map[string]any{"sizer": map[string]any{"enabled": true},
		"sizes": map[string]any{"maxPerNamespace": map[string]any{"tenant-b": "2500m", "*": 8, "tenant-a": 2}}})
	const want = "--max-size=*=8,tenant-a=2,tenant-b=2500m"
	agent, sizer := containerArgs(bounded, "DaemonSet"), containerArgs(bounded, "Deployment")
	for what, args := range map[string][]string{"the agent": agent, "the sizer": sizer} {
		if got := hasMaxSize(args); got != want {
			t.Errorf("%s's --max-size: %q, want %q", what, got, want)
		}
	}
	if out, err := exec.Command(binary(t, "cgwarden-sizer"), append(sizer, "--help")...).CombinedOutput(); err != nil {
		t.Errorf("cgwarden-sizer %s --help: %v\n%s", strings.Join(sizer, " "), err, out)
	}
	if out, err := exec.Command(cgwarden(t), append(agent, "--help")...).CombinedOutput(); err != nil {
		t.Errorf("cgwarden %s --help: %v\n%s", strings.Join(agent, " "), err, out)
	}
	// The sizer refuses a bound it cannot take when it parses its flags,
	// as the agent does in its Config (internal/agent TestOptionsMaxSize).
	bad := helm(t, map[string]any{"sizer": map[string]any{"enabled": true}, "sizes": map[string]any{"maxPerNamespace": map[string]any{"tenant": 0}}})
	out, err := exec.Command(binary(t, "cgwarden-sizer"), append(containerArgs(bad, "Deployment"), "--help")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "a size must be above 0") {
		t.Errorf("cgwarden-sizer with tenant: 0: %v\n%s", err, out)
	}
	for what, args := range map[string][]string{"the agent": containerArgs(helm(t, map[string]any{"sizer": map[string]any{"enabled": true}}), "DaemonSet"),
		"the sizer": containerArgs(helm(t, map[string]any{"sizer": map[string]any{"enabled": true}}), "Deployment")} {
		if got := hasMaxSize(args); got != "" {
			t.Errorf("%s has %q with sizes.maxPerNamespace empty", what, got)
		}
	}
}
