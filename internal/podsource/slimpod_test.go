package podsource

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

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
// its whole object (and so to the same inventory, which reads nothing
// else), the two sets give every pod the same size and origin, VM objects
// and the runner's -vmspec included, and the slim pods are a fraction of
// the whole ones.
func TestSlimPodYieldsTheSameMetadata(t *testing.T) {
	full := fullPods(t)
	var whole, slimmed []metadata.Pod
	var fullBytes, slimBytes int
	for i := range full {
		k := &full[i]
		s := slim(t, k)
		a, b := metadata.FromAPI(k), metadata.FromAPI(s)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: the slim pod reads differently:\nwhole %+v\nslim  %+v", k.Name, a, b)
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
