package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/realtest"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/cgwarden/cgwarden/internal/poll"
)

var (
	crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	vmGVR  = schema.GroupVersionResource{Group: "vm.neon.tech", Version: "v1", Resource: "virtualmachines"}
)

// neonVMCRD is shaped like NeonVM's VirtualMachine CRD as far as the sizer
// reads it: group vm.neon.tech, version v1, namespaced, spec.guest.cpus
// {min, max, use}. The cpus object keeps unknown fields and any value, so
// that the bad inputs (negative, huge, absent) reach the sizer instead of
// being refused by the schema. The scale lane (test/scale) installs the
// same file.
const neonVMCRD = "testdata/neonvm-crd.json"

// warnings collects the API server's warning headers (the webhook's
// AdmissionResponse warnings arrive as such).
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	w.msgs = append(w.msgs, text)
	w.mu.Unlock()
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// ensureCRD installs the VirtualMachine CRD unless the cluster has one. It
// never removes it: its name is fixed by NeonVM's group, so tests running at
// the same time on the shared cluster (this lane in other worktrees, the
// agent's VM test) use the same one, and deleting a CRD deletes every
// object of it in every namespace, theirs included. The test's own VMs go
// with its namespace.
func ensureCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	var u unstructured.Unstructured
	raw, err := os.ReadFile(neonVMCRD)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &u.Object); err != nil {
		t.Fatalf("%s: %v", neonVMCRD, err)
	}
	// One a previous test removed may still be going away.
	poll.Until(t, 60*time.Second, "no terminating VirtualMachine CRD", func() (bool, string, error) {
		got, err := dyn.Resource(crdGVR).Get(ctx, u.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return got.GetDeletionTimestamp() == nil, "terminating", nil
	})
	_, err = dyn.Resource(crdGVR).Create(ctx, &u, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		t.Log("virtualmachines.vm.neon.tech exists: using it as is")
	case err != nil:
		t.Fatal(err)
	default:
		t.Log("virtualmachines.vm.neon.tech installed; left installed for tests running beside this one")
	}
	poll.Until(t, 60*time.Second, "CRD established", func() (bool, string, error) {
		got, err := dyn.Resource(crdGVR).Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, "", nil
			}
		}
		return false, fmt.Sprint(conds), nil
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// sizerLane is cgwarden-sizer run on the host behind a url: webhook.
type sizerLane struct {
	e        *env
	ns, name string
	bin      string
	port     int
	// ca is the CA made at install: the Secret's and the caBundle.
	ca []byte
	// args are the sizer's flags besides the lane's (--pod-level).
	args []string
	// logPath is the running sizer's log.
	logPath string
}

// log is what the sizer has logged so far.
func (l *sizerLane) log(t *testing.T) string {
	t.Helper()
	return readFile(t, l.logPath)
}

// startSizer installs a MutatingWebhookConfiguration for namespace ns only
// (other engineers' pods never reach it) pointing at a url: on 127.0.0.1,
// starts cgwarden-sizer on the host serving it, and waits until the API
// server admits through it, with args besides the lane's flags. It returns
// a function that stops the sizer (also called at cleanup).
func startSizer(t *testing.T, e *env, ns string, args ...string) (stop func(), l *sizerLane) {
	t.Helper()
	ctx := context.Background()
	l = &sizerLane{e: e, ns: ns, name: "cgwarden-sizer-" + ns, bin: buildSizer(t), port: freePort(t), args: args}
	// The CA made at install by `cgwarden-sizer ca`: its Secret, and the
	// webhook's caBundle set to it here, by the installer; the sizer
	// only reads the Secret.
	sec := installCA(t, e, l.bin, ns, "sizer-ca")
	l.ca = sec.Data["ca.crt"]
	ignore, none := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone
	timeout := int32(5)
	url := fmt.Sprintf("https://127.0.0.1:%d/mutate", l.port)
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: l.name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "sizer.cgwarden.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: l.ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			FailurePolicy:           &ignore,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
		}},
	}
	if _, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), l.name, metav1.DeleteOptions{})
	})
	return l.run(t), l
}

// installCA runs `cgwarden-sizer ca` and creates the Secret it wrote, as
// Secret ns/name.
func installCA(t *testing.T, e *env, bin, ns, name string) *corev1.Secret {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command(bin, "ca", "--out-dir", dir, "--namespace", ns, "--ca-secret", name).CombinedOutput(); err != nil {
		t.Fatalf("cgwarden-sizer ca: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "secret.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sec corev1.Secret
	if err := yaml.Unmarshal(raw, &sec); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().Secrets(ns).Create(context.Background(), &sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &sec
}

// run starts the sizer process and waits until the API server admits
// through it.
func (l *sizerLane) run(t *testing.T) (stop func()) {
	t.Helper()
	ctx := context.Background()
	e, ns, port := l.e, l.ns, l.port
	logPath := filepath.Join(t.TempDir(), "sizer.log")
	l.logPath = logPath
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig", e.kubeconfig, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--namespace", ns, "--ca-secret", "sizer-ca", "--cert-hosts", "127.0.0.1",
		"--leader-elect=false", "--coalesce", "1s", "--crd-recheck", "2s", "--log-level", "debug"}, l.args...)
	cmd := exec.Command(l.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
	}
	t.Cleanup(func() {
		stop()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("sizer log:\n%s", b)
		}
	})

	// The CA of the install (the caBundle) lets the API server (and us)
	// trust what it serves.
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(l.ca) {
		t.Fatal("the install's CA is not PEM")
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	poll.Until(t, 30*time.Second, "sizer /healthz over TLS verified by its CA", func() (bool, string, error) {
		r, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
		if err != nil {
			return false, err.Error(), nil
		}
		r.Body.Close()
		return r.StatusCode == 200, r.Status, nil
	})
	// The API server reloads webhook configurations asynchronously: a dry
	// run until a pod comes back sized.
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Annotations: map[string]string{"cgwarden.io/cpu": "100m"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: busybox}}},
	}
	poll.Until(t, 30*time.Second, "the API server admitting through the sizer", func() (bool, string, error) {
		p, err := e.cs.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, "", err
		}
		q := p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
		return q.MilliValue() == 100, "requests " + q.String(), nil
	})
	return stop
}

// runnerPod is a NeonVM-shaped runner pod for VM vm: owned by it, labelled
// with its name, one neonvm-runner container, no requests.
func neonRunnerPod(name string, vm *unstructured.Unstructured) *corev1.Pod {
	grace := int64(1)
	ctrl := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"vm.neon.tech/name": vm.GetName()}},
		Spec: corev1.PodSpec{
			HostNetwork: true, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "neonvm-runner", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}},
		},
	}
	if vm.GetUID() != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "vm.neon.tech/v1", Kind: "VirtualMachine", Name: vm.GetName(), UID: vm.GetUID(), Controller: &ctrl}}
	}
	return p
}

// attest writes what the NeonVM controller writes once it has made a VM's
// runner pod: the VM's status.podName (through the status subresource).
// The agent and the sizer give a VM's size only to the pod its status
// names, never to a pod for its own owner references or labels.
func attest(t *testing.T, vms dynamic.ResourceInterface, vm, pod string) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := vms.Get(ctx, vm, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(cur.Object, pod, "status", "podName"); err != nil {
			return err
		}
		_, err = vms.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("VirtualMachine %s: status.podName %s: %v", vm, pod, err)
	}
}

func newVM(name string, use any) *unstructured.Unstructured {
	cpus := map[string]any{"min": "250m", "max": int64(4)} // NeonVM holds use within these; so do the agent and the sizer
	if use != nil {
		cpus["use"] = use
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"guest": map[string]any{"cpus": cpus}},
	}}
}

// podShares is the pod cgroup's weight file and the value the kubelet
// writes for milli CPUs (cgroup v1 shares; v2 its linear conversion).
func podShares(uid types.UID, milli int64) (string, int64) {
	root, wf := cgroupRoot()
	file := filepath.Join(root, "kubepods", "burstable", "pod"+string(uid), wf)
	shares := max(milli*1024/1000, 2)
	if wf == "cpu.weight" {
		return file, 1 + ((shares-2)*9999)/262142
	}
	return file, shares
}

func waitRunning(t *testing.T, e *env, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	poll.Until(t, 120*time.Second, "pod "+ns+"/"+name+" running", func() (bool, string, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		pod = p
		if p.Status.Phase == corev1.PodFailed {
			return false, "", fmt.Errorf("pod failed: %+v", p.Status)
		}
		return p.Status.Phase == corev1.PodRunning, describe(p), nil
	})
	return pod
}

// The sizer, as a process on the host serving a url: webhook: a
// NeonVM-shaped runner pod created without requests is admitted Burstable
// with its VM's size, its pod cgroup weighs that size, and it follows the
// VM's use by in-place resize within 15 s of each change; a KubeVirt-shaped
// pod and bad inputs are admitted unchanged, the bad ones with a warning.
// The request is the container's (--pod-level=off), as on a cluster
// before 1.36; TestSizerPodLevelResize is the pod-level path.
func TestSizerAdmitsAndResizesVMPods(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	dyn := dynamicClient(t, e)
	warn := &warnings{}
	wcfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	wcfg.WarningHandler = warn
	wcs, err := kubernetes.NewForConfig(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	ensureCRD(t, dyn)
	ns := e.namespace(t)
	startSizer(t, e, ns, "--pod-level=off")
	vms := dyn.Resource(vmGVR).Namespace(ns)

	node, err := e.cs.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alloc := node.Status.Allocatable.Cpu().MilliValue()

	// Admission: use 1 → requests.cpu=1, Burstable, weight of 1 CPU.
	vm, err := vms.Create(ctx, newVM("vm1", int64(1)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := wcs.CoreV1().Pods(ns).Create(ctx, neonRunnerPod("vm1-runner", vm), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	attest(t, vms, "vm1", pod.Name)
	if w := warn.take(); len(w) != 0 {
		t.Errorf("warnings for a sizable pod: %q", w)
	}
	if q := pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.String() != "1" {
		t.Fatalf("admitted with requests.cpu %q, want 1", q.String())
	}
	if _, ok := pod.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU]; ok {
		t.Fatal("the sizer set a CPU limit")
	}
	t.Logf("admitted: %s", pod.Annotations["cgwarden.io/sized"])
	pod = waitRunning(t, e, ns, pod.Name)
	if pod.Status.QOSClass != corev1.PodQOSBurstable {
		t.Fatalf("QoS %s, want Burstable", pod.Status.QOSClass)
	}
	file, want := podShares(pod.UID, 1000)
	if got := readInt(t, file); got != want {
		t.Fatalf("%s = %d, want %d", file, got, want)
	}
	t.Logf("%s = %d (1 CPU)", file, want)

	// Resize: use 1 → 3 → 2 (each bounded by the node's allocatable),
	// then 1500m; the kubelet's weight follows within 15 s of each change.
	for _, use := range []any{int64(3), int64(2), "1500m"} {
		uq := resource.MustParse(fmt.Sprint(use))
		milli := uq.MilliValue()
		target := min(milli, alloc)
		cur, err := vms.Get(ctx, "vm1", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			t.Fatal("VirtualMachine vm1 is gone: was the shared CRD deleted by a test running beside this one?")
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(cur.Object, use, "spec", "guest", "cpus", "use"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := vms.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, wantShares := podShares(pod.UID, target)
		var got int64
		for time.Since(start) < 15*time.Second {
			if got = readInt(t, file); got == wantShares {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		q := p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
		if got != wantShares {
			t.Fatalf("use %v: %s = %d after 15 s, want %d; pod requests.cpu %s; %s", use, file, got, wantShares, q.String(), describe(p))
		}
		if q.MilliValue() != target {
			t.Fatalf("use %v: requests.cpu %s, want %dm", use, q.String(), target)
		}
		note := ""
		if target != milli {
			note = fmt.Sprintf(" (cut to the node's allocatable %dm)", alloc)
		}
		t.Logf("use %v: requests.cpu %s, %s = %d after %.2fs%s", use, q.String(), filepath.Base(file), got, time.Since(start).Seconds(), note)
	}

	// KubeVirt-shaped virt-launcher pod with its requests: unchanged.
	grace := int64(1)
	kv := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-vmi1-abcde", Labels: map[string]string{"kubevirt.io": "virt-launcher", "kubevirt.io/domain": "vmi1"}},
		Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{
			Name: "compute", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
		}}},
	}
	got, err := wcs.CoreV1().Pods(ns).Create(ctx, kv, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if q := got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; q.String() != "100m" || got.Annotations["cgwarden.io/sized"] != "" || len(warn.take()) != 0 {
		t.Fatalf("KubeVirt pod changed: requests.cpu %s, annotations %v", q.String(), got.Annotations)
	}

	// Bad input: admitted unchanged, with a warning saying why.
	bad := []struct {
		vm   string
		use  any
		want string
	}{
		{vm: "no-use", use: nil, want: "no spec.guest.cpus.use: a request is made only from the size the VM runs at"},
		{vm: "negative", use: int64(-1), want: "negative"},
		{vm: "huge", use: int64(100000), want: "above 8192 CPUs"}, // no max to hold it within
		{vm: "gone", want: "not found"},
	}
	for _, b := range bad {
		v := newVM(b.vm, b.use)
		if b.vm == "huge" {
			unstructured.RemoveNestedField(v.Object, "spec", "guest", "cpus", "max")
		}
		if b.vm != "gone" {
			if v, err = vms.Create(ctx, v, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		p, err := wcs.CoreV1().Pods(ns).Create(ctx, neonRunnerPod(b.vm+"-runner", v), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", b.vm, err)
		}
		w := warn.take()
		_, hasCPU := p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
		if hasCPU || p.Annotations["cgwarden.io/sized"] != "" {
			t.Errorf("%s: pod changed: %+v %v", b.vm, p.Spec.Containers[0].Resources, p.Annotations)
		}
		if len(w) != 1 || !strings.Contains(w[0], b.want) {
			t.Errorf("%s: warnings %q, want one with %q", b.vm, w, b.want)
		}
		t.Logf("%s: admitted unchanged, warning: %s", b.vm, strings.Join(w, "; "))
	}
}

func dynamicClient(t *testing.T, e *env) dynamic.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// With the sizer down, a runner pod is still created (failurePolicy
// Ignore), unsized and BestEffort; when the sizer returns, its controller
// records an Event saying the pod was not sized (resize cannot change a QoS
// class), once.
func TestSizerDownPodsStillCreated(t *testing.T) {
	e := cluster(t)
	ctx := context.Background()
	dyn := dynamicClient(t, e)
	ensureCRD(t, dyn)
	ns := e.namespace(t)
	stop, lane := startSizer(t, e, ns)
	vms := dyn.Resource(vmGVR).Namespace(ns)
	vm, err := vms.Create(ctx, newVM("vm1", int64(1)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	start := time.Now()
	pod, err := e.cs.CoreV1().Pods(ns).Create(ctx, neonRunnerPod("vm1-runner", vm), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("pod refused with the sizer down: %v", err)
	}
	attest(t, vms, "vm1", pod.Name)
	if q, on := cpuRequest(pod); on != "" {
		t.Fatalf("sized with the sizer down? requests.cpu %s on %s", q.String(), on)
	}
	t.Logf("created unsized in %.2fs with the sizer down", time.Since(start).Seconds())
	pod = waitRunning(t, e, ns, pod.Name)
	if pod.Status.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("QoS %s, want BestEffort", pod.Status.QOSClass)
	}
	lane.run(t)
	var ev []corev1.Event
	poll.Until(t, 60*time.Second, "a CPUNotSized Event on "+pod.Name, func() (bool, string, error) {
		list, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=CPUNotSized,involvedObject.name=" + pod.Name})
		if err != nil {
			return false, "", err
		}
		ev = list.Items
		return len(ev) > 0, fmt.Sprintf("%d events", len(ev)), nil
	})
	t.Logf("Event %s: %s", ev[0].Reason, ev[0].Message)
	// Nudge the VM twice: still one Event (counted, not repeated).
	for _, use := range []int64{2, 1} {
		cur, err := vms.Get(ctx, "vm1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(cur.Object, use, "spec", "guest", "cpus", "use")
		if _, err := vms.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
	}
	list, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=CPUNotSized,involvedObject.name=" + pod.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Count > 1 {
		t.Errorf("CPUNotSized recorded %d times (count %d), want once", len(list.Items), list.Items[0].Count)
	}
	p, _ := e.cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if q, on := cpuRequest(p); on != "" {
		t.Errorf("a BestEffort pod was given a request: %s on %s", q.String(), on)
	}
}

// cpuUsage is a pod cgroup's CPU time in nanoseconds.
func cpuUsage(t *testing.T, uid types.UID) int64 {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		b := readFile(t, filepath.Join("/sys/fs/cgroup/kubepods/burstable", "pod"+string(uid), "cpu.stat"))
		for _, line := range strings.Split(b, "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				var n int64
				fmt.Sscan(v, &n)
				return n * 1000
			}
		}
		t.Fatal("no usage_usec")
	}
	return readInt(t, filepath.Join("/sys/fs/cgroup/cpuacct/kubepods/burstable", "pod"+string(uid), "cpuacct.usage"))
}

// Two VM pods sized 1 : 4 at admission, burning on one pinned CPU beside a
// Burstable hog: their measured CPU split is within 10% of 1 : 4, with no
// cgwarden write to any cgroup (the kubelet weighs them from their
// requests). The sizes are 250m and 1 so that both fit a 2-CPU node.
func TestSizerVMPodsSplitBySize(t *testing.T) {
	e := cluster(t)
	// The module lanes run beside this lane (scripts/test), and their
	// burner tests pin burners too: one at a time.
	realtest.LockCPU(t)
	ctx := context.Background()
	dyn := dynamicClient(t, e)
	ensureCRD(t, dyn)
	ns := e.namespace(t)
	startSizer(t, e, ns)
	vms := dyn.Resource(vmGVR).Namespace(ns)
	node, err := e.cs.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cpu := node.Status.Capacity.Cpu().Value() - 1 // the last CPU
	burn := fmt.Sprintf("exec taskset -c %d sh -c 'while :; do :; done'", cpu)
	pods := map[string]*corev1.Pod{}
	for name, use := range map[string]string{"small": "250m", "large": "1"} {
		vm, err := vms.Create(ctx, newVM(name, use), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := neonRunnerPod(name+"-runner", vm)
		p.Spec.Containers[0].Command = []string{"sh", "-c", burn}
		if pods[name], err = e.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		attest(t, vms, name, p.Name)
	}
	grace := int64(1)
	hog, err := e.cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hog"},
		Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{
			Name: "hog", Image: busybox, ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", burn},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods["hog"] = hog
	for name, p := range pods {
		pods[name] = waitRunning(t, e, ns, p.Name)
	}
	time.Sleep(2 * time.Second)
	before := map[string]int64{}
	for name, p := range pods {
		before[name] = cpuUsage(t, p.UID)
	}
	const window = 10 * time.Second
	time.Sleep(window)
	used := map[string]float64{}
	for name, p := range pods {
		used[name] = float64(cpuUsage(t, p.UID)-before[name]) / float64(window)
		file, _ := podShares(p.UID, 0)
		q, on := cpuRequest(p)
		t.Logf("%s: requests.cpu %s on %s, %s %d, %.3f CPU", name, q.String(), on, filepath.Base(file), readInt(t, file), used[name])
	}
	ratio := used["large"] / used["small"]
	t.Logf("large : small = %.2f : 1 (want 4 ± 10%%)", ratio)
	if ratio < 3.6 || ratio > 4.4 {
		t.Errorf("large : small = %.2f, want within 10%% of 4", ratio)
	}
}

// deployedSizer is deploy/kustomize/sizer installed by installSizer.
type deployedSizer struct {
	// port is where it listens, on the host's 127.0.0.1.
	port int
	// nsLabels and template are its Namespace's labels and its pod
	// template as shipped.
	nsLabels map[string]string
	template map[string]any
	logs     func() string
}

// installSizer installs deploy/kustomize/sizer as the lane can run it
// (TestSizerDeployedWithItsManifests says what is changed and why) in
// namespace sys, its webhook called for pods of namespace ns only, and
// waits until it is Ready, leads and keeps its certificate.
func (e *env) installSizer(t *testing.T, sys, ns string) *deployedSizer {
	t.Helper()
	ctx := context.Background()
	dyn := dynamicClient(t, e)
	port := freePort(t)
	suffix := "-" + sys

	// Installed as docs/sizing.md says: an overlay of the directory with
	// the CA Component `cgwarden-sizer ca` writes (its Secret, and the
	// webhook's caBundle).
	overlay := t.TempDir()
	if out, err := exec.Command(buildSizer(t), "ca", "--out-dir", filepath.Join(overlay, "sizer-ca")).CombinedOutput(); err != nil {
		t.Fatalf("cgwarden-sizer ca: %v\n%s", err, out)
	}
	abs, err := filepath.Abs("../../deploy/kustomize/sizer")
	if err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(overlay, abs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"),
		[]byte("resources: ["+base+"]\ncomponents: [sizer-ca]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(e.kubectl, "kustomize", overlay).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	// Its namespace (cgwarden-sizer) becomes the test's; the webhook's
	// exclusion of cgwarden-system stays.
	text := strings.ReplaceAll(string(out), "namespace: cgwarden-sizer\n", "namespace: "+sys+"\n")
	text = strings.ReplaceAll(text, "--listen=:9443", fmt.Sprintf("--listen=127.0.0.1:%d", port))
	text = strings.ReplaceAll(text, "port: 9443", fmt.Sprintf("port: %d", port))
	text = strings.ReplaceAll(text, "containerPort: 9443", fmt.Sprintf("containerPort: %d", port))
	gvr := map[string]schema.GroupVersionResource{
		"ServiceAccount":               {Version: "v1", Resource: "serviceaccounts"},
		"Secret":                       {Version: "v1", Resource: "secrets"},
		"Service":                      {Version: "v1", Resource: "services"},
		"ClusterRole":                  {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		"ClusterRoleBinding":           {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
		"Role":                         {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
		"RoleBinding":                  {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		"Deployment":                   {Group: "apps", Version: "v1", Resource: "deployments"},
		"MutatingWebhookConfiguration": {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"},
		"PodDisruptionBudget":          {Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
		// Installed as shipped (its port is the test's, above); the lane's
		// only network is a loopback CNI with no NetworkPolicy
		// enforcement, and the sizer runs on the host network here, which
		// NetworkPolicy does not apply to: it is installed, not exercised.
		"NetworkPolicy": {Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	}
	var nsLabels map[string]string
	var template map[string]any
	url := fmt.Sprintf("https://127.0.0.1:%d/mutate", port)
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(text, "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		switch u.GetKind() {
		case "Namespace":
			// The test's namespace stands in for it (the lane's pods need
			// the host network, which restricted refuses); its Pod
			// Security labels are checked below on the pod as shipped.
			nsLabels = u.GetLabels()
			continue
		case "ClusterRole":
			u.SetName(u.GetName() + suffix)
			rules, _, _ := unstructured.NestedSlice(u.Object, "rules")
			for _, r := range rules {
				m := r.(map[string]any)
				if names, ok := m["resourceNames"].([]any); ok && len(names) == 1 && names[0] == "cgwarden-sizer" {
					m["resourceNames"] = []any{"cgwarden-sizer" + suffix}
				}
			}
			_ = unstructured.SetNestedSlice(u.Object, rules, "rules")
		case "ClusterRoleBinding":
			u.SetName(u.GetName() + suffix)
			_ = unstructured.SetNestedField(u.Object, "cgwarden-sizer"+suffix, "roleRef", "name")
		case "MutatingWebhookConfiguration":
			u.SetName(u.GetName() + suffix)
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			h := hooks[0].(map[string]any)
			// The url instead of the Service; the caBundle of the
			// install kept.
			cc := h["clientConfig"].(map[string]any)
			delete(cc, "service")
			cc["url"] = url
			h["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}}
			_ = unstructured.SetNestedSlice(u.Object, hooks, "webhooks")
		case "Deployment":
			template = runtime.DeepCopyJSON(u.Object)["spec"].(map[string]any)["template"].(map[string]any)
			_ = unstructured.SetNestedField(u.Object, int64(1), "spec", "replicas")
			_ = unstructured.SetNestedField(u.Object, true, "spec", "template", "spec", "hostNetwork")
			cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			c := cs[0].(map[string]any)
			c["image"], c["imagePullPolicy"] = agentImage, "Never"
			var args []any
			for _, a := range c["args"].([]any) {
				if !strings.HasPrefix(a.(string), "--cert-hosts=") {
					args = append(args, a)
				}
			}
			c["args"] = append(args, "--cert-hosts=127.0.0.1", "--crd-recheck=2s")
			// On the host network listening on 127.0.0.1: the kubelet
			// probes there.
			for _, probe := range []string{"readinessProbe", "livenessProbe"} {
				_ = unstructured.SetNestedField(c, "127.0.0.1", probe, "httpGet", "host")
			}
			// No kube-proxy: the API server's service address does not
			// route; it listens on the host's 127.0.0.1:6443 (as for the
			// agent, testdata/agent).
			c["env"] = append(c["env"].([]any),
				map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
				map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": "6443"})
			_ = unstructured.SetNestedSlice(u.Object, cs, "spec", "template", "spec", "containers")
		}
		objs = append(objs, u)
	}
	if len(objs) != 11 || nsLabels == nil || template == nil {
		t.Fatalf("%d objects from deploy/kustomize/sizer and its CA besides its Namespace, want 11 and a Namespace and a Deployment", len(objs))
	}
	for _, u := range objs {
		r, ok := gvr[u.GetKind()]
		if !ok {
			t.Fatalf("unexpected kind %s", u.GetKind())
		}
		var ri dynamic.ResourceInterface = dyn.Resource(r)
		if u.GetNamespace() != "" {
			ri = dyn.Resource(r).Namespace(u.GetNamespace())
		}
		if _, err := ri.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
		if u.GetNamespace() == "" {
			name := u.GetName()
			t.Cleanup(func() { _ = dyn.Resource(r).Delete(context.Background(), name, metav1.DeleteOptions{}) })
		}
	}
	logs := func() string {
		out, _ := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "logs", "-n", sys, "deploy/cgwarden-sizer", "--tail", "30").CombinedOutput()
		return string(out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sizer logs:\n%s", logs())
		}
	})
	start := time.Now()
	poll.Until(t, 90*time.Second, "the sizer Ready", func() (bool, string, error) {
		pods, err := e.cs.CoreV1().Pods(sys).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cgwarden-sizer"})
		if err != nil {
			return false, "", err
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return true, "", nil
				}
			}
			return false, describe(&p), nil
		}
		return false, "no pod", nil
	})
	t.Logf("sizer Ready %v after create", time.Since(start).Round(time.Second))
	poll.Until(t, 30*time.Second, "the leader Lease", func() (bool, string, error) {
		l, err := e.cs.CoordinationV1().Leases(sys).Get(ctx, "cgwarden-sizer", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "none", nil
		}
		if err != nil {
			return false, "", err
		}
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", "no holder", nil
	})
	if _, err := e.cs.CoreV1().Secrets(sys).Get(ctx, "cgwarden-sizer-ca", metav1.GetOptions{}); err != nil {
		t.Fatalf("its CA Secret: %v", err)
	}

	return &deployedSizer{port: port, nsLabels: nsLabels, template: template, logs: logs}
}

// The sizer as deploy/kustomize/sizer installs it — its ServiceAccount,
// RBAC, Deployment (leader election, managed certificate) — in a namespace
// of its own, with what a one-node cluster without a pod network or
// kube-proxy needs changed: the Deployment on the host network with one
// replica listening on 127.0.0.1, the webhook called by url:, the
// cluster-scoped objects renamed, and the webhook limited to the test's
// namespace, the API server's address given (no kube-proxy). Its RBAC is
// then what lets it size, resize and report.
func TestSizerDeployedWithItsManifests(t *testing.T) {
	e := cluster(t)
	importAgentImage(t)
	ensureCRD(t, dynamicClient(t, e))
	sys := e.namespace(t)
	ns := e.namespace(t)
	sz := e.installSizer(t, sys, ns)
	checkRestricted(t, e, sz.nsLabels, sz.template)
	logs := sz.logs
	// Every container Ready for 60 s from here, while the test goes on.
	ready := make(chan error, 1)
	go func() { ready <- e.staysReady(sys, "app.kubernetes.io/name=cgwarden-sizer", 60*time.Second) }()
	defer func() {
		if err := <-ready; err != nil {
			t.Errorf("the sizer after Ready: %v", err)
		}
	}()
	// Admission through the deployed sizer (its caBundle, its RBAC to read
	// the VM), then a resize (its RBAC on pods/resize, nodes, events).
	e.sizeAndResizeVM(t, ns)
	if strings.Contains(logs(), "forbidden") {
		t.Errorf("the sizer was refused something by RBAC:\n%s", logs())
	}
}

// sizeAndResizeVM creates VirtualMachine vm1 of 1 CPU in ns and its runner
// pod, which the installed sizer admits with requests.cpu=1 (once the
// API server has its caBundle; on the pod or on its container, as its
// --pod-level=auto finds the cluster); the VM then grows to 1500m and the
// sizer resizes the pod in place: its pod cgroup's weight follows, and a
// CPUResized Event says so. The pod runs on the host's node.
func (e *env) sizeAndResizeVM(t *testing.T, ns string) {
	t.Helper()
	e.sizeAndResizeVMOn(t, ns, "1500m", 15*time.Second, func(p *corev1.Pod) *corev1.Pod { return p }, func(uid types.UID, milli int64) (func() int64, int64) {
		file, want := podShares(uid, milli)
		return func() int64 { return readInt(t, file) }, want
	})
}

// sizeAndResizeVMOn is sizeAndResizeVM with the VM grown to grow, the
// runner pod placed by place, its pod cgroup's weight read by weight (the
// reader, and the value the kubelet writes for milli CPUs) and expected
// within after the VM's change.
func (e *env) sizeAndResizeVMOn(t *testing.T, ns, grow string, within time.Duration, place func(*corev1.Pod) *corev1.Pod, weight func(uid types.UID, milli int64) (func() int64, int64)) {
	t.Helper()
	ctx := context.Background()
	dyn := dynamicClient(t, e)
	vms := dyn.Resource(vmGVR).Namespace(ns)
	vm, err := vms.Create(ctx, newVM("vm1", int64(1)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	poll.Until(t, 30*time.Second, "a runner pod admitted with requests.cpu=1", func() (bool, string, error) {
		p, err := e.cs.CoreV1().Pods(ns).Create(ctx, place(neonRunnerPod("vm1-runner", vm)), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, "", err
		}
		q, on := cpuRequest(p)
		return q.String() == "1", "requests.cpu " + q.String() + " on " + on, nil
	})
	pod, err = e.cs.CoreV1().Pods(ns).Create(ctx, place(neonRunnerPod("vm1-runner", vm)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	attest(t, vms, "vm1", pod.Name)
	pod = waitRunning(t, e, ns, pod.Name)
	read, want := weight(pod.UID, 1000)
	if got := read(); got != want {
		t.Errorf("the runner pod's cgroup weighs %d as admitted, want %d (1 CPU)", got, want)
	}
	cur, err := vms.Get(ctx, "vm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(cur.Object, grow, "spec", "guest", "cpus", "use")
	if _, err := vms.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	growQ := resource.MustParse(grow)
	read, want = weight(pod.UID, growQ.MilliValue())
	resized := time.Now()
	poll.Until(t, within, "pod weight for "+grow, func() (bool, string, error) {
		got := read()
		return got == want, fmt.Sprint(got), nil
	})
	t.Logf("resized in place to %s: the pod cgroup weighs %d, %v after the VM's change", grow, want, time.Since(resized).Round(100*time.Millisecond))
	poll.Until(t, 15*time.Second, "a CPUResized Event", func() (bool, string, error) {
		list, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=CPUResized"})
		if err != nil {
			return false, "", err
		}
		if len(list.Items) > 0 {
			t.Logf("Event CPUResized: %s", list.Items[0].Message)
		}
		return len(list.Items) > 0, "none", nil
	})
}
