package scale

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/cgwarden/cgwarden/internal/poll"
)

var (
	vmGVR  = schema.GroupVersionResource{Group: "vm.neon.tech", Version: "v1", Resource: "virtualmachines"}
	crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// The cluster lane's NeonVM CRD, and the deploy manifests whose RBAC the
// simulated agents and the sizer run under.
const (
	crdFile       = "../cluster/testdata/neonvm-crd.json"
	agentRBACFile = "../../deploy/kustomize/base/rbac.yaml"
	// The agent's size-trust role, as a cluster with the size policy
	// grants it: the agents watch the policy, its binding and their Node
	// (the policy itself is not installed; they watch for it all the
	// same).
	sizeTrustRBACFile = "../../deploy/kustomize/size-policy/rbac.yaml"
	sizerRBACFile     = "../../deploy/kustomize/sizer/rbac.yaml"
	agentNamespace    = "cgwarden-system"
	agentSA           = "cgwarden"
	sizerNamespace    = "cgwarden-sizer"
	sizerSA           = "cgwarden-sizer"
	// kwokAnnotation marks the Nodes kwok manages (scripts/scale).
	kwokAnnotation = "kwok.x-k8s.io/node"
)

var setupOnce sync.Once

// setup installs, once per test binary, what every scale test needs: the
// VirtualMachine CRD, and the agent's and the sizer's ServiceAccounts and
// RBAC from deploy/.
func (e *env) setup(t *testing.T) {
	t.Helper()
	var err error
	setupOnce.Do(func() { err = e.install() })
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) install() error {
	ctx := context.Background()
	raw, err := os.ReadFile(crdFile)
	if err != nil {
		return err
	}
	var crd unstructured.Unstructured
	if err := json.Unmarshal(raw, &crd.Object); err != nil {
		return fmt.Errorf("%s: %w", crdFile, err)
	}
	if _, err := e.dyn.Resource(crdGVR).Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, ns := range []string{agentNamespace, sizerNamespace} {
		if err := e.namespace(ctx, ns); err != nil {
			return err
		}
	}
	for _, f := range []string{agentRBACFile, sizeTrustRBACFile, sizerRBACFile} {
		if err := e.applyRBAC(ctx, f); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := e.dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err == nil && established(got) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD %s not established after 60s (%v)", crd.GetName(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Discovery serves the new group a moment after Established.
	for {
		if _, err := e.cs.Discovery().ServerResourcesForGroupVersion(vmGVR.GroupVersion().String()); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not in discovery after 60s", vmGVR.GroupVersion())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// namespace makes ns and its default ServiceAccount (no controller
// manager runs to make it, and pods are refused without it).
func (e *env) namespace(ctx context.Context, ns string) error {
	_, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_, err = e.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// testNamespace makes a namespace for one test, emptied at its end: its
// pods (at once: no kubelet stops them) and its VirtualMachines, so that
// the next test's agents find none of them on their nodes. The namespace
// itself is deleted too, though without a controller manager it stays
// Terminating (empty) until scripts/scale down.
func (e *env) testNamespace(t *testing.T, name string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%1_000_000)
	if err := e.namespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		zero := int64(0)
		deleted(t, "the pods of "+ns, func() error {
			return e.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		}, func() (int, error) {
			l, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				return 0, err
			}
			return len(l.Items), nil
		})
		vms := e.dyn.Resource(vmGVR).Namespace(ns)
		deleted(t, "the VirtualMachines of "+ns, func() error {
			return vms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		}, func() (int, error) {
			l, err := vms.List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				return 0, err
			}
			return len(l.Items), nil
		})
		_ = e.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	return ns
}

// deleted runs a DeleteCollection (del) and waits, up to 5 minutes, for
// left to count none. A large collection's request can fail while the
// deletion goes on — the API server's 60 s timeout on tens of thousands of
// VirtualMachines, or the stream reset when its handler gives up on 5,000
// pods ("stream error: INTERNAL_ERROR") — so an error is not the outcome:
// what is left is, and the request is made again every 30 s while
// something is.
func deleted(t *testing.T, what string, del func() error, left func() (int, error)) {
	t.Helper()
	err := del()
	if err == nil {
		return
	}
	t.Logf("deleting %s: %v; waiting for the deletion to finish", what, err)
	deadline := time.Now().Add(5 * time.Minute)
	again := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		n, lerr := left()
		if lerr == nil && n == 0 {
			return
		}
		if time.Now().After(again) {
			if derr := del(); derr != nil {
				err = derr
			}
			again = time.Now().Add(30 * time.Second)
		}
		time.Sleep(2 * time.Second)
	}
	t.Errorf("deleting %s: %v, and some were still there 5 minutes later", what, err)
}

// applyRBAC creates the ServiceAccounts, ClusterRoles, Roles and bindings
// of a deploy manifest as they are.
func (e *env) applyRBAC(ctx context.Context, file string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var doc runtime.RawExtension
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if len(doc.Raw) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc.Raw, nil, nil)
		if err != nil {
			return err
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = e.cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = e.cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = e.cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = e.cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = e.cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			return fmt.Errorf("unexpected %T", obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
}

// serviceAccountConfig is a client configuration that authenticates as
// ServiceAccount ns/name with a bound token (TokenRequest), as a pod of
// that ServiceAccount would; client-go's default rate limits.
func (e *env) serviceAccountConfig(t *testing.T, ns, name string) *rest.Config {
	t.Helper()
	exp := int64(4 * 3600)
	tr, err := e.cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, name, err)
	}
	rc := rest.AnonymousClientConfig(e.admin)
	rc.BearerToken = tr.Status.Token
	rc.QPS, rc.Burst = 0, 0 // client-go's defaults
	return rc
}

// bulk runs f(0..n-1) on workers goroutines and returns the first error.
func bulk(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}

// nodeName is simulated node i.
func nodeName(i int) string { return fmt.Sprintf("scale-node-%05d", i) }

// makeNodes creates Nodes 0..n-1 (those that do not exist yet) for kwok to
// manage, each with 64 allocatable CPUs, and waits until kwok made them
// Ready.
func (e *env) makeNodes(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	cpu, mem := resource.MustParse("64"), resource.MustParse("256Gi")
	err := bulk(n, 32, func(i int) error {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Annotations: map[string]string{kwokAnnotation: "fake"},
				Labels: map[string]string{"kubernetes.io/hostname": nodeName(i), "kubernetes.io/os": "linux", "type": "kwok"}},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem, corev1.ResourcePods: resource.MustParse("1000")},
				Capacity:    corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem, corev1.ResourcePods: resource.MustParse("1000")},
			},
		}
		_, err := e.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !e.kwok {
		if err := bulk(n, 32, func(i int) error { return e.nodeReady(ctx, nodeName(i)) }); err != nil {
			t.Fatal(err)
		}
	}
	poll.Every(500*time.Millisecond).Until(t, 5*time.Minute, fmt.Sprintf("%d nodes Ready (kwok)", n), func() (bool, string, error) {
		list, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		ready := 0
		for _, nd := range list.Items {
			for _, c := range nd.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= n, fmt.Sprintf("%d Ready", ready), nil
	})
}

// vm is one NeonVM VirtualMachine and its runner pod.
type vm struct {
	ns, name, node string
	// milli is its spec.guest.cpus.use at creation.
	milli int64
	// unsized: its runner pod was admitted without a CPU request (the
	// sizer's webhook down or overloaded, failurePolicy Ignore), and is
	// Burstable by its memory request alone; the resize controller adds
	// the request.
	unsized bool
}

// vmObject is a VirtualMachine with the fields NeonVM's controller and
// autoscaler write (neondatabase/autoscaling, neonvm/apis/neonvm/v1:
// spec.guest with cpus, memory slots, root disk, command, env and ports;
// disks; status with phase, pod, node, sizes and conditions), about 1.9 KB
// of JSON as the API server stores it: the size of the objects that made
// the agent's memory grow in the cluster lane (issue 22).
func vmObject(v vm) *unstructured.Unstructured {
	use := fmt.Sprintf("%dm", v.milli)
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": v.name, "namespace": v.ns,
			"labels": map[string]any{"autoscaling.neon.tech/enabled": "true", "neon/endpoint-id": "ep-" + v.name, "neon/project-id": "scale-project"},
			"annotations": map[string]any{
				"autoscaling.neon.tech/bounds": `{"min":{"cpu":"250m","mem":"1Gi"},"max":{"cpu":"8","mem":"32Gi"}}`,
				"autoscaling.neon.tech/config": `{"loadAverageFractionTarget":0.9,"memoryUsageFractionTarget":0.75}`,
			}},
		"spec": map[string]any{
			"schedulerName": "autoscale-scheduler", "restartPolicy": "Never", "runnerPort": 25183, "qmp": 20183,
			"qmpManual": 20184, "terminationGracePeriodSeconds": 5, "serviceAccountName": "default", "enableSSH": true,
			"guest": map[string]any{
				"cpus":           map[string]any{"min": "250m", "max": "8", "use": use},
				"memorySlotSize": "1Gi",
				"memorySlots":    map[string]any{"min": 1, "max": 32, "use": 4},
				"rootDisk":       map[string]any{"image": "neondatabase/vm-compute-node-v17:8123", "size": "2Gi", "imagePullPolicy": "IfNotPresent"},
				"command":        []any{"/usr/local/bin/compute_ctl"},
				"args":           []any{"--pgdata", "/var/db/postgres/compute", "--connstr", "postgresql://cloud_admin@localhost:55433/postgres", "--compute-id", v.name},
				"env":            []any{map[string]any{"name": "NEON_ENDPOINT", "value": "ep-" + v.name}, map[string]any{"name": "OTEL_SERVICE_NAME", "value": "compute"}},
				"ports":          []any{map[string]any{"name": "postgres", "port": 55433}, map[string]any{"name": "http", "port": 3080}, map[string]any{"name": "host-metrics", "port": 9100}},
				"settings":       map[string]any{"swap": "1Gi"},
			},
			"disks": []any{map[string]any{"name": "pgdata", "mountPath": "/var/db/postgres/compute", "emptyDisk": map[string]any{"size": "16Gi", "discard": true}}},
		},
	}}
}

// vmStatus is the status NeonVM writes once the runner runs.
func vmStatus(v vm, podName string) map[string]any {
	return map[string]any{
		"phase": "Running", "podName": podName, "podIP": "10.16.0.1", "node": v.node,
		"cpus": fmt.Sprintf("%dm", v.milli), "memorySize": "4Gi", "restartCount": 0, "sshSecretName": "ssh-neonvm-" + v.name,
		"conditions": []any{map[string]any{"type": "Available", "status": "True", "reason": "Reconciling",
			"message":            fmt.Sprintf("Pod (%s) for VirtualMachine (%s) created successfully", podName, v.name),
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
	}
}

// runnerPod is the runner pod NeonVM's controller makes for v: the
// vm.neon.tech/name label, a controller owner reference to the
// VirtualMachine, a neonvm-runner container given the VM's spec (-vmspec,
// base64 JSON), bound to v.node. Its CPU request is the VM's use, as the
// sizer's webhook sets it at admission (no webhook runs here); none if
// v.unsized.
func runnerPod(v vm, vmUID types.UID, spec map[string]any) *corev1.Pod {
	p := sizedRunnerPod(v, vmUID, spec)
	if v.unsized {
		delete(p.Annotations, "cgwarden.io/sized")
		delete(p.Spec.Containers[0].Resources.Requests, corev1.ResourceCPU)
	}
	return p
}

func sizedRunnerPod(v vm, vmUID types.UID, spec map[string]any) *corev1.Pod {
	specJSON, _ := json.Marshal(spec)
	yes, grace := true, int64(5)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: v.name + "-runner", Namespace: v.ns,
			Labels:      map[string]string{"vm.neon.tech/name": v.name, "app.kubernetes.io/name": "NeonVM", "neon/endpoint-id": "ep-" + v.name},
			Annotations: map[string]string{"cgwarden.io/sized": fmt.Sprintf("%dm from NeonVM VirtualMachine %s", v.milli, v.name)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "vm.neon.tech/v1", Kind: "VirtualMachine", Name: v.name, UID: vmUID,
				Controller: &yes, BlockOwnerDeletion: &yes}}},
		Spec: corev1.PodSpec{
			NodeName: v.node, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken: new(bool), EnableServiceLinks: new(bool),
			Containers: []corev1.Container{{
				Name: "neonvm-runner", Image: "neondatabase/neonvm-runner:v0.40.0", ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"runner"},
				Args:    []string{"-vmspec", base64.StdEncoding.EncodeToString(specJSON), "-vmstatus", base64.StdEncoding.EncodeToString([]byte(`{}`))},
				Ports:   []corev1.ContainerPort{{Name: "qmp", ContainerPort: 20183}, {Name: "qmp-manual", ContainerPort: 20184}, {Name: "runner", ContainerPort: 25183}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: *resource.NewMilliQuantity(v.milli, resource.DecimalSI), corev1.ResourceMemory: resource.MustParse("4Gi")}},
				SecurityContext: &corev1.SecurityContext{Privileged: &yes},
				VolumeMounts:    []corev1.VolumeMount{{Name: "virtualmachineimages", MountPath: "/vm/images"}},
			}},
			Volumes: []corev1.Volume{{Name: "virtualmachineimages", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

// makeVMs creates each VM (spec, then status) and, when withPods, its
// runner pod; it waits until kwok reports every pod Running.
func (e *env) makeVMs(t *testing.T, vms []vm, withPods bool) {
	t.Helper()
	ctx := context.Background()
	// The runner pods to wait for: those made here and those the
	// namespace has already (a test that grows its VMs in steps).
	namespaces := map[string]int{}
	for _, v := range vms {
		if _, ok := namespaces[v.ns]; ok || !withPods {
			continue
		}
		had, err := e.cs.CoreV1().Pods(v.ns).List(ctx, metav1.ListOptions{LabelSelector: "vm.neon.tech/name"})
		if err != nil {
			t.Fatal(err)
		}
		namespaces[v.ns] = len(had.Items)
	}
	err := bulk(len(vms), 32, func(i int) error {
		v := vms[i]
		obj := vmObject(v)
		got, err := e.dyn.Resource(vmGVR).Namespace(v.ns).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("VirtualMachine %s/%s: %w", v.ns, v.name, err)
		}
		got.Object["status"] = vmStatus(v, v.name+"-runner")
		if _, err := e.dyn.Resource(vmGVR).Namespace(v.ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("VirtualMachine %s/%s status: %w", v.ns, v.name, err)
		}
		if !withPods {
			return nil
		}
		spec, _ := obj.Object["spec"].(map[string]any)
		p, err := e.cs.CoreV1().Pods(v.ns).Create(ctx, runnerPod(v, got.GetUID(), spec), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("runner pod of %s/%s: %w", v.ns, v.name, err)
		}
		if !e.kwok {
			return e.podRunning(ctx, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !withPods {
		return
	}
	for _, v := range vms {
		namespaces[v.ns]++
	}
	for ns, want := range namespaces {
		e.waitRunning(t, 5*time.Minute, fmt.Sprintf("%d runner pods Running in %s (kwok)", want, ns), ns, "vm.neon.tech/name", want)
	}
	if e.kwok {
		// The resources a kubelet with in-place resize reports in each
		// running container's status (kwok's pod-ready stage writes
		// none): without them the API server refuses every resize
		// ("Pod running on node without support for resize").
		if err := bulk(len(vms), 32, func(i int) error { return e.reportResources(ctx, vms[i]) }); err != nil {
			t.Fatal(err)
		}
	}
}

// reportResources writes the runner container's resources into its
// status, as the kubelet does.
func (e *env) reportResources(ctx context.Context, v vm) error {
	patch := fmt.Appendf(nil, `{"status":{"containerStatuses":[{"name":"neonvm-runner","resources":{"requests":{"cpu":"%dm","memory":"4Gi"}}}]}}`, v.milli)
	if v.unsized {
		patch = []byte(`{"status":{"containerStatuses":[{"name":"neonvm-runner","resources":{"requests":{"memory":"4Gi"}}}]}}`)
	}
	_, err := e.cs.CoreV1().Pods(v.ns).Patch(ctx, v.name+"-runner", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// setUse patches v's spec.guest.cpus.use, as NeonVM's autoscaler does.
func (e *env) setUse(ctx context.Context, v vm, milli int64) error {
	patch := fmt.Appendf(nil, `{"spec":{"guest":{"cpus":{"use":"%dm"}}}}`, milli)
	_, err := e.dyn.Resource(vmGVR).Namespace(v.ns).Patch(ctx, v.name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// Without kwok (CGWARDEN_SCALE_KWOK unset: scripts/scale did not start
// it), the test does once what kwok's stages do: a Node's Ready condition,
// a Pod's Running phase and running container statuses (with the
// resources a kubelet with in-place resize reports), each one status
// update from the test's client (kwok watches and patches them instead).

func (e *env) nodeReady(ctx context.Context, name string) error {
	n, err := e.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "simulated by the scale test", LastHeartbeatTime: now, LastTransitionTime: now}}
	_, err = e.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

// waitRunning polls (up to timeout) until at least want pods that
// selector matches in ns are Running.
func (e *env) waitRunning(t *testing.T, timeout time.Duration, what, ns, selector string, want int) {
	t.Helper()
	poll.Every(500*time.Millisecond).Until(t, timeout, what, func() (bool, string, error) {
		list, err := e.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error(), nil
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running >= want, fmt.Sprintf("%d of %d Running", running, want), nil
	})
}

func (e *env) podRunning(ctx context.Context, p *corev1.Pod) error {
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &now
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			State:     corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			Resources: c.Resources.DeepCopy()})
	}
	_, err := e.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}
