package deploytest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// kubeScoreVersion is the kube-score the test builds from its own Go
// module (`go install …@version`, which keeps its own go.mod: v1.20.0
// needs k8s.io/api/autoscaling/v2beta1, which the Kubernetes libraries
// Helm brings here no longer have). kube-linter's module is not served
// by the module proxy.
const kubeScoreVersion = "v1.20.0"

// kubeScore returns the kube-score binary, built once into
// $CGWARDEN_TOOLS_CACHE (default /var/cache/cgwarden-tools) under its
// version, as the cluster lane caches its binaries.
func kubeScore(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("CGWARDEN_TOOLS_CACHE")
	if cache == "" {
		cache = "/var/cache/cgwarden-tools"
	}
	dir := filepath.Join(cache, "kube-score-"+kubeScoreVersion)
	bin := filepath.Join(dir, "kube-score")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	// The cache itself may not exist yet (a fresh machine).
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatalf("kube-score cache: %v", err)
	}
	tmp, err := os.MkdirTemp(cache, ".kube-score-")
	if err != nil {
		t.Fatalf("kube-score cache: %v", err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "install", "github.com/zegl/kube-score/cmd/kube-score@"+kubeScoreVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building kube-score %s: %v\n%s", kubeScoreVersion, err, out)
	}
	// Renamed into place whole: a run cut short leaves no half binary.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tmp, "kube-score"), bin); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	return bin
}

// TestKubeScore: kube-score over every rendered configuration of the
// manifests (configurations: each kustomize directory, the chart in each
// mode) reports nothing at WARNING or CRITICAL, but for the checks an
// object waives with a kube-score/ignore annotation, whose reason is a
// comment beside it in the manifest (and docs/security.md, "Manifest
// linting").
func TestKubeScore(t *testing.T) {
	bin := kubeScore(t)
	dir := t.TempDir()
	for _, cfg := range configurations(t) {
		var stream bytes.Buffer
		for _, o := range cfg.objs {
			b, err := yaml.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			stream.WriteString("---\n")
			stream.Write(b)
		}
		f := filepath.Join(dir, strings.NewReplacer(" ", "-", "+", "-").Replace(cfg.name)+".yaml")
		if err := os.WriteFile(f, stream.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		// -o ci: one line per check and object, "[GRADE] kind/name: …".
		out, err := exec.Command(bin, "score", "-o", "ci", "--kubernetes-version", "v1.37", f).Output()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("kube-score: %v", err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "[CRITICAL]") || strings.HasPrefix(l, "[WARNING]") {
				t.Errorf("%s: %s", cfg.name, l)
			}
		}
		if err != nil && !t.Failed() {
			t.Errorf("%s: kube-score exited %v with no finding reported:\n%s", cfg.name, err, out)
		}
		resourcesWaivedOnlyForCPULimit(t, cfg)
	}
}

// resourcesWaivedOnlyForCPULimit: a workload that waives kube-score's
// container-resources (for the CPU limit, which it does not set) still
// gives every container CPU and memory requests and a memory limit, which
// the same check would otherwise ask for.
func resourcesWaivedOnlyForCPULimit(t *testing.T, cfg config) {
	t.Helper()
	for _, o := range cfg.objs {
		md, _ := o["metadata"].(map[string]any)
		ann, _ := md["annotations"].(map[string]any)
		ignored, _ := ann["kube-score/ignore"].(string)
		if !slices.Contains(strings.Split(ignored, ","), "container-resources") {
			continue
		}
		spec, ok := podSpecs([]object{o})[o.key()]
		if !ok {
			t.Errorf("%s: %s waives container-resources but has no pod template", cfg.name, o.key())
			continue
		}
		for _, c := range containers(spec) {
			res, _ := c["resources"].(map[string]any)
			req, _ := res["requests"].(map[string]any)
			lim, _ := res["limits"].(map[string]any)
			for _, need := range []struct {
				m          map[string]any
				kind, what string
			}{{req, "request", "cpu"}, {req, "request", "memory"}, {lim, "limit", "memory"}} {
				if need.m[need.what] == nil {
					t.Errorf("%s: %s container %v waives container-resources without a %s %s", cfg.name, o.key(), c["name"], need.what, need.kind)
				}
			}
		}
	}
}
