package podsource

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// fullPods reads testdata/pods-full.json: whole pods as the API server
// serves them, managedFields and all — a NeonVM runner as the neonvm
// controller makes it (owned by its VirtualMachine, -vmspec argument,
// privileged, no CPU request), a KubeVirt virt-launcher (compute and the
// guest-console-log sidecar, two init containers, owned by its VMI), a
// Deployment's pod with a native sidecar, pod-level resources, overhead
// and an ephemeral debug container, and a pending BestEffort pod whose
// status has no QoS class yet.
func fullPods(t *testing.T) []corev1.Pod {
	t.Helper()
	raw, err := os.ReadFile("testdata/pods-full.json")
	if err != nil {
		t.Fatal(err)
	}
	var list corev1.PodList
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 4 {
		t.Fatalf("%d pods in testdata/pods-full.json, want 4", len(list.Items))
	}
	return list.Items
}

func slim(t *testing.T, k *corev1.Pod) *corev1.Pod {
	t.Helper()
	o, err := SlimPod(k)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*corev1.Pod)
}

// TestSlimPodYieldsTheSameMetadata: the informer's transform keeps all
// that cgwarden reads: each slim pod converts to the same metadata.Pod as
// its whole object but for the labels and owner references it leaves out
// (and so to the same inventory, which reads nothing else), the two sets
// give every pod the same size and origin, VM objects and the runner's
// -vmspec included, and the slim pods are a fraction of the whole ones.
// With every label kept (the CLI's source) the labels are the whole's.
func TestSlimPodYieldsTheSameMetadata(t *testing.T) {
	full := fullPods(t)
	var whole, slimmed []metadata.Pod
	var fullBytes, slimBytes int
	for i := range full {
		k := &full[i]
		s := slim(t, k)
		a, b := metadata.FromAPI(k), metadata.FromAPI(s)
		all, _ := slimPodAllLabels(k)
		if c := metadata.FromAPI(all.(*corev1.Pod)); !reflect.DeepEqual(c.Labels, a.Labels) || !reflect.DeepEqual(c.Owners, b.Owners) {
			t.Errorf("%s: the slim pod with all labels has labels %v and owners %v; want the whole's labels %v, the slim's owners %v", k.Name, c.Labels, c.Owners, a.Labels, b.Owners)
		}
		// What SlimPod leaves out, and only that.
		left := b
		left.Labels, left.Owners = a.Labels, a.Owners
		if !reflect.DeepEqual(a, left) {
			t.Errorf("%s: the slim pod reads differently:\nwhole %+v\nslim  %+v", k.Name, a, b)
		}
		for l := range b.Labels {
			if l != vmsize.LabelNeonVM && l != vmsize.LabelKubeVirt {
				t.Errorf("%s: label %s kept", k.Name, l)
			}
		}
		if again := slim(t, s); !reflect.DeepEqual(again, s) {
			t.Errorf("%s: slimming a slim pod changed it", k.Name)
		}
		whole, slimmed = append(whole, a), append(slimmed, b)
		fb, _ := json.Marshal(k)
		sb, _ := json.Marshal(s)
		fullBytes, slimBytes = fullBytes+len(fb), slimBytes+len(sb)
	}
	// (The runner's -vmspec, kept, is most of what is left.)
	if slimBytes*2 > fullBytes {
		t.Errorf("slim pods are %d bytes of JSON against %d whole: want at most half", slimBytes, fullBytes)
	}
	t.Logf("JSON: %d bytes whole, %d slim", fullBytes, slimBytes)

	// The runner's VM object and the VMI, as the agent reads them.
	vms := []metadata.VM{
		{Kind: "neonvm", Namespace: "default", Name: "compute-quiet-mode-a1b2c3", MilliCPU: 3000, PodLabel: vmsize.LabelNeonVM, UID: "6c1f9a2e-3b4d-4e5f-8a7b-9c0d1e2f3a4b"},
		{Kind: "kubevirt", Namespace: "vms", Name: "fedora-vm", MilliCPU: 2000, PodLabel: vmsize.LabelKubeVirt},
	}
	trust := metadata.OperatorTrust("test").Merge("*", "the test")
	for _, withVMs := range []bool{false, true} {
		ws, ss := metadata.NewSet(whole), metadata.NewSet(slimmed)
		ws.SetTrust(trust)
		ss.SetTrust(trust)
		if withVMs {
			ws.ApplyVMs(vms)
			ss.ApplyVMs(vms)
		}
		sized := 0
		for _, p := range whole {
			wsz, wok := ws.Size(p.UID)
			ssz, sok := ss.Size(p.UID)
			if wsz != ssz || wok != sok {
				t.Errorf("%s (VMs %v): size %+v %v whole, %+v %v slim", p.Name, withVMs, wsz, wok, ssz, sok)
			}
			wo, _ := ws.Origin(p.UID)
			so, _ := ss.Origin(p.UID)
			if wo != so {
				t.Errorf("%s (VMs %v): origin %+v whole, %+v slim", p.Name, withVMs, wo, so)
			}
			if wok {
				sized++
			}
		}
		// Not vacuous: the runner, the VMI's pod and the annotated pod
		// are sized (by VMs or the annotation), the pending pod not.
		if sized != 3 {
			t.Errorf("VMs %v: %d pods sized, want 3", withVMs, sized)
		}
	}
	runner := whole[0]
	if runner.VMSize == nil || runner.VMSize.MilliCPU != 2000 || len(runner.Owners) != 1 {
		t.Errorf("the runner's -vmspec or owner was not read: %+v", runner)
	}
	if r := slimmed[0]; len(r.Owners) != 1 || r.Labels[vmsize.LabelNeonVM] == "" || !reflect.DeepEqual(metadata.VMRefs(&r), metadata.VMRefs(&runner)) {
		t.Errorf("the slim runner lost its VM label or owner: %+v", r)
	}
	if len(slimmed[2].Owners) != 0 || len(whole[2].Owners) == 0 {
		t.Errorf("the web pod's ReplicaSet owner: %v whole, %v slim; want it read only whole", whole[2].Owners, slimmed[2].Owners)
	}
	if whole[2].Annotation[vmsize.AnnotationCPU] != "1500m" || len(whole[2].Containers) != 4 {
		t.Errorf("the web pod's annotation or containers were not read: %+v", whole[2])
	}
	if whole[3].QoS != "besteffort" {
		t.Errorf("the pending pod's QoS %q, want besteffort (computed)", whole[3].QoS)
	}
}

// TestMirrorPodFoundByItsStaticUID: a static pod's cgroup is named by the
// UID the kubelet gave it (its config hash), which the API server's
// mirror of it carries in kubernetes.io/config.mirror and not as its own
// UID (a joined systemd node's static pods were audited as orphan cgroups
// for it). Slimmed or whole, the mirror is found by that UID and by its
// own; a mirror whose hash is another pod's UID does not take that pod's
// place, and two pods claiming one static pod are neither believed.
func TestMirrorPodFoundByItsStaticUID(t *testing.T) {
	full := fullPods(t)
	mirror := *full[0].DeepCopy()
	mirror.Name, mirror.UID = "kube-apiserver-node-a", "0f4e3b2a-1111-4222-8333-944455556666"
	mirror.Annotations = map[string]string{metadata.AnnotationMirror: "5c5e1ab7d2f0c3a9e1b4d6f8a0c2e4f6", "kubernetes.io/config.hash": "5c5e1ab7d2f0c3a9e1b4d6f8a0c2e4f6"}
	squatter := *full[0].DeepCopy()
	squatter.Name = "claims-another"
	squatter.Annotations = map[string]string{metadata.AnnotationMirror: string(full[0].UID)}
	squatter.UID = "7a7a7a7a-2222-4333-8444-955566667777"
	for _, k := range []*corev1.Pod{&mirror, slim(t, &mirror)} {
		set := metadata.NewSet([]metadata.Pod{metadata.FromAPI(&full[0]), metadata.FromAPI(k), metadata.FromAPI(&squatter)})
		for _, uid := range []string{"5c5e1ab7d2f0c3a9e1b4d6f8a0c2e4f6", string(mirror.UID)} {
			if p, ok := set.Pod(uid); !ok || p.Name != mirror.Name {
				t.Errorf("Pod(%s) = %+v, %v; want the mirror %s", uid, p, ok, mirror.Name)
			}
		}
		if p, ok := set.Pod(string(full[0].UID)); !ok || p.Name != full[0].Name {
			t.Errorf("Pod(%s) = %+v, %v; want %s, not a mirror naming its UID", full[0].UID, p, ok, full[0].Name)
		}
	}
	// A second pod claiming the same static pod: neither is believed.
	twin := *mirror.DeepCopy()
	twin.Name, twin.UID = "claims-the-same", "8b8b8b8b-3333-4444-8555-966677778888"
	set := metadata.NewSet([]metadata.Pod{metadata.FromAPI(&mirror), metadata.FromAPI(&twin)})
	if p, ok := set.Pod("5c5e1ab7d2f0c3a9e1b4d6f8a0c2e4f6"); ok {
		t.Errorf("two pods claim one static pod: Pod(hash) = %s, want none", p.Name)
	}
}

// TestTenantCannotGrowTheInformer: what a tenant writes on its pod in bulk
// — labels and owner references, which the API server bounds only by the
// object's size (1.5 MiB) — is not kept by the agent's informer: a pod with
// 1 MiB of labels and 2,000 owner references slims to what a plain pod
// does, keeping the VM label and the first VirtualMachine owner it claims
// (where to look: the VM's status decides). The CLI's source (all labels)
// keeps the labels, for its selectors, and not the owners.
func TestTenantCannotGrowTheInformer(t *testing.T) {
	k := fullPods(t)[0].DeepCopy() // the NeonVM runner
	vmLabel, owner := k.Labels[vmsize.LabelNeonVM], k.OwnerReferences[0]
	for i := 0; len(k.Labels) < 12000; i++ {
		k.Labels[fmt.Sprintf("tenant.example/l%05d", i)] = strings.Repeat("v", 63)
	}
	k.OwnerReferences = nil
	for i := range 2000 {
		o := owner
		o.Name, o.UID = fmt.Sprintf("claim-%d", i), types.UID(fmt.Sprintf("u-%d", i))
		if i%2 == 0 {
			o.APIVersion, o.Kind = "apps/v1", "ReplicaSet"
		}
		k.OwnerReferences = append(k.OwnerReferences, o)
	}
	k.OwnerReferences = append([]metav1.OwnerReference{{APIVersion: owner.APIVersion, Kind: owner.Kind}}, k.OwnerReferences...) // no name: not a claim
	whole, _ := json.Marshal(k)
	s := slim(t, k)
	kept, _ := json.Marshal(s)
	t.Logf("pod JSON: %d bytes whole, %d slim", len(whole), len(kept))
	if len(whole) < 1<<20 || len(kept) > 8<<10 {
		t.Errorf("a pod of %d bytes slims to %d, want under 8 KiB", len(whole), len(kept))
	}
	if !reflect.DeepEqual(s.Labels, map[string]string{vmsize.LabelNeonVM: vmLabel}) {
		t.Errorf("labels kept: %d, want the VM label alone", len(s.Labels))
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Name != "claim-1" {
		t.Errorf("owner references kept: %v, want the first VirtualMachine with a name", s.OwnerReferences)
	}
	if again := slim(t, s); !reflect.DeepEqual(again, s) {
		t.Error("slimming a slim pod changed it")
	}
	all, _ := slimPodAllLabels(k)
	if p := all.(*corev1.Pod); len(p.Labels) != len(k.Labels) || len(p.OwnerReferences) != 1 {
		t.Errorf("all labels: %d labels and %d owners kept, want %d and 1", len(p.Labels), len(p.OwnerReferences), len(k.Labels))
	}
}
