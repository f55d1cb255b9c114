package agent_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgwarden/cgwarden/internal/agent"
	"github.com/cgwarden/cgwarden/internal/cli"
	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// weightRules are what `serve --fix size-blind-weights,besteffort-starvation`
// (the example in serve's --help) and `fix --only` of the same name hold.
var weightRules = []string{"size-blind-weights", "besteffort-starvation"}

// TestServeKeepsWhatFixSetFromThePodsFile is issue 38's item 4 as a new
// user met it, on the live kernel with seed 000's layout (VM pods of 1, 2
// and 4 CPUs, BestEffort, sized by the cgwarden.io/cpu annotation of a
// pods file, beside a Burstable pod): `fix --apply --pods FILE` raises the
// VM weights and the BestEffort tier, then `serve --pods FILE --fix
// size-blind-weights,besteffort-starvation` must keep them — and hold them
// against a kubelet-style reset of the tier — not put the tier back to 2
// because it believed the same file less than fix did (before: the tier
// was at 2 within a second, with nothing in the log).
func TestServeKeepsWhatFixSetFromThePodsFile(t *testing.T) {
	s := realtest.NewScratch(t)
	tree := realtest.NewVMTree(s, 500, 1000, 2000, 4000)
	file := writePodsFile(t, tree.Pods())
	journalDir := t.TempDir()
	fixed := fixApply(t, tree, file, journalDir)

	// cgwarden serve --pods FILE --fix size-blind-weights,besteffort-starvation.
	var logs realtest.LockedBuffer
	o := &agent.Options{Listen: "127.0.0.1:0", Interval: 200 * time.Millisecond, SizeCheck: 50 * time.Millisecond,
		Fix: weightRules, JournalDir: journalDir, MaxTierCPU: "100", HostRoot: "/", Base: s.Name,
		PodsFile: file, Metadata: "auto", Log: slog.New(slog.NewTextHandler(&logs, nil))}
	a, _ := startAgent(t, o)
	waitMetric(t, a, `(?m)^cgwarden_weight_replans_total [1-9]`, 15*time.Second)

	check := func(when string) {
		t.Helper()
		var off []string
		for rel, want := range fixed {
			if got := tree.Weight(rel); got != want {
				off = append(off, fmt.Sprintf("%s at %d, fix --apply set %d", rel, got, want))
			}
		}
		if len(off) > 0 {
			t.Errorf("%s: %s; the agent's log:\n%s", when, strings.Join(off, "; "), logs.String())
		}
	}
	// Long enough for several size checks and scans.
	time.Sleep(2 * time.Second)
	check("serve --fix after fix --apply")

	// The kubelet resets the tier: serve restores what fix set.
	tier := realtest.Kube + "/besteffort"
	tree.SetWeight(tier, tree.PodWeight(fairness.MinShares))
	deadline := time.Now().Add(15 * time.Second)
	for tree.Weight(tier) != fixed[tier] && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	check("after a kubelet-style reset of the tier")
	if strings.Contains(logs.String(), "not believed") {
		t.Error("serve refused a size of the operator's pods file")
	}
}

// TestServeSaysWhichSizeItStopsBelieving: after `fix --apply --pods FILE`,
// an agent whose pods come from a live source (here a Lister, as the CRI
// or the API server give them) keeps the live rules — no API server, no
// --trust-size-annotations: the annotations are not believed — and so
// lowers the BestEffort tier fix raised. It may, but not silently: at
// start it logs each size it does not believe with the pod and the
// reason, and before lowering the tier it warns that `fix --apply` set
// it, naming the sizes it no longer believes and why (before: nothing).
func TestServeSaysWhichSizeItStopsBelieving(t *testing.T) {
	s := realtest.NewScratch(t)
	tree := realtest.NewVMTree(s, 500, 1000, 2000, 4000)
	journalDir := t.TempDir()
	fixed := fixApply(t, tree, writePodsFile(t, tree.Pods()), journalDir)

	var logs realtest.LockedBuffer
	pods := &lister{}
	pods.set(tree.Pods())
	o := &agent.Options{Listen: "127.0.0.1:0", Interval: 200 * time.Millisecond, SizeCheck: 50 * time.Millisecond,
		Fix: weightRules, JournalDir: journalDir, MaxTierCPU: "100", HostRoot: "/", Base: s.Name,
		Lister: pods, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	startAgent(t, o)
	tier := realtest.Kube + "/besteffort"
	poll.Every(20*time.Millisecond).Until(t, 15*time.Second, "the tier moved from what fix set (to the kubelet's minimum: the annotations are not believed from a live source)", func() (bool, string, error) {
		w := tree.Weight(tier)
		return w != fixed[tier], fmt.Sprintf("tier at %d", w), nil
	})
	if got := tree.Weight(tier); got != tree.PodWeight(fairness.MinShares) {
		t.Fatalf("tier at %d: want the kubelet's %d (the annotations are not believed from a live source)", got, tree.PodWeight(fairness.MinShares))
	}
	log := logs.String()
	for _, p := range tree.VMs {
		started := regexp.MustCompile(`level=WARN msg="pod size not believed[^"]*" component=sizes pod=default/` + p.Name + ` .*reason="not trusted in namespace default: `)
		if !started.MatchString(log) {
			t.Errorf("no start-up line saying %s's size is not believed, and why:\n%s", p.Name, log)
		}
	}
	lowered := regexp.MustCompile("level=WARN msg=\"lowering a weight that `cgwarden fix --apply` set: sizes fix believed are not believed here\" component=hold path=\\S+/" +
		regexp.QuoteMeta(tier) + `/cpu\.\S+ pod="" fixSet=` + fmt.Sprint(fixed[tier]) + ` now=` + fmt.Sprint(tree.PodWeight(fairness.MinShares)) +
		` notBelieved=".*default/vm-1: annotation cgwarden.io/cpu=.*not trusted in namespace default`)
	if !lowered.MatchString(log) {
		t.Errorf("no warning before lowering the tier fix set:\n%s", log)
	}
}

// fixApply is `cgwarden fix --apply --pods file --only
// size-blind-weights,besteffort-starvation` on tree, journaled in
// journalDir: the pods file loaded as the command loads it. It returns
// the weights fix set (the tier and the VM pods), by cgroup.
func fixApply(t *testing.T, tree *realtest.VMTree, file, journalDir string) map[string]uint64 {
	t.Helper()
	meta, err := cli.LoadPods(file)
	if err != nil {
		t.Fatal(err)
	}
	e := &fix.Engine{FS: tree.S.Host, Base: tree.S.Name, JournalDir: journalDir, Meta: meta, By: journal.ByFix}
	defer e.Close()
	if _, err := e.Apply(fix.Options{Only: weightRules, MaxTierMilliCPU: 100_000}); err != nil {
		t.Fatal(err)
	}
	tier := realtest.Kube + "/besteffort"
	fixed := map[string]uint64{tier: tree.Weight(tier)}
	for _, p := range tree.VMs {
		fixed[p.Rel] = tree.Weight(p.Rel)
	}
	if fixed[tier] <= tree.PodWeight(fairness.MinShares) {
		t.Fatalf("fix --apply left the tier at %d: nothing to keep", fixed[tier])
	}
	return fixed
}

// TestPodsFileSizesAlikeInFixAndServe: one pods file, one verdict on each
// size — what `fix`, `audit` and `inspect` believe of it (cli.LoadPods) is
// what `serve --pods FILE` believes (its loop's metadata, and its /audit's
// sizes). The file holds an annotated VM pod and a pod whose annotation is
// not a size, in a namespace no --trust-size-annotations names (before:
// serve ignored the first, "not trusted in namespace", where fix took
// it).
func TestPodsFileSizesAlikeInFixAndServe(t *testing.T) {
	s := realtest.NewScratch(t)
	tree := realtest.NewVMTree(s, 500, 1000, 2000)
	pods := tree.Pods()
	pods[1].Annotation = map[string]string{"cgwarden.io/cpu": "lots"}
	file := writePodsFile(t, pods)

	fixMeta, err := cli.LoadPods(file)
	if err != nil {
		t.Fatal(err)
	}
	o := &agent.Options{Listen: "127.0.0.1:0", Interval: 200 * time.Millisecond, HostRoot: "/", Base: s.Name,
		PodsFile: file, Metadata: "auto", Log: slog.New(slog.DiscardHandler)}
	a, _ := startAgent(t, o)
	_, serveMeta, err := a.Loop.Fresh(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want, got := verdicts(fixMeta), verdicts(serveMeta)
	if !slices.Equal(want, got) {
		t.Errorf("one pods file, two verdicts:\nfix:   %q\nserve: %q", want, got)
	}
	if n := strings.Count(strings.Join(want, "\n"), "taken"); n != 1 {
		t.Errorf("want the one VM pod's size taken and the bad annotation ignored: %q", want)
	}

	// Said out loud: the size not taken is an ignored-size finding on
	// /audit and a series on /metrics.
	rec := httptest.NewRecorder()
	a.Server.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/audit", nil))
	var doc struct {
		Findings []struct {
			Rule    string
			Subject struct{ PodUID string }
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("/audit: %v", err)
	}
	found := false
	for _, f := range doc.Findings {
		found = found || (f.Rule == "ignored-size" && f.Subject.PodUID == pods[1].UID)
	}
	if !found {
		t.Errorf("/audit has no ignored-size finding for %s: %s", pods[1].UID, rec.Body.String())
	}
	waitMetric(t, a, `(?m)^cgwarden_pod_cpu_size_not_believed\{[^}]*uid="`+pods[1].UID+`"\} 1$`, 5*time.Second)
}

// verdicts lists, by pod UID, what a set makes of each declared size.
func verdicts(m *metadata.Set) []string {
	var out []string
	for _, o := range m.Origins() {
		v := "taken"
		if o.Ignored != "" {
			v = "ignored: " + o.Ignored
		}
		out = append(out, fmt.Sprintf("%s %s %dm %s", o.Pod.UID, o.Via, o.MilliCPU, v))
	}
	return out
}

// waitMetric waits until the agent's /metrics matches re.
func waitMetric(t *testing.T, a *agent.Agent, re string, timeout time.Duration) {
	t.Helper()
	rx := regexp.MustCompile(re)
	poll.Every(50*time.Millisecond).UntilTrue(t, timeout, "/metrics matching "+re, func() bool {
		rec := httptest.NewRecorder()
		a.Server.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rx.MatchString(rec.Body.String())
	})
}

// writePodsFile writes pods as `kubectl get pods -A -o json` would: the
// name, namespace, UID, annotations, QoS class, CPU requests and the
// containers' IDs that the metadata reads back.
func writePodsFile(t *testing.T, pods []metadata.Pod) string {
	t.Helper()
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "List", APIVersion: "v1"}}
	for _, p := range pods {
		k := corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: types.UID(p.UID), Annotations: p.Annotation}}
		k.Status.QOSClass = map[string]corev1.PodQOSClass{layout.BestEffort: corev1.PodQOSBestEffort,
			layout.Burstable: corev1.PodQOSBurstable, layout.Guaranteed: corev1.PodQOSGuaranteed}[p.QoS]
		for _, c := range p.Containers {
			ctr := corev1.Container{Name: c.Name}
			if c.RequestMilliCPU != nil && *c.RequestMilliCPU > 0 {
				ctr.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(*c.RequestMilliCPU, resource.DecimalSI)}
			}
			k.Spec.Containers = append(k.Spec.Containers, ctr)
			k.Status.ContainerStatuses = append(k.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, ContainerID: "containerd://" + c.ID})
		}
		list.Items = append(list.Items, k)
	}
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(t.TempDir(), "pods.json")
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}
