package metadata

import (
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// TestOrigin is each trust decision: which declared sizes are taken, which
// are capped, and why the others are not.
func TestOrigin(t *testing.T) {
	vmOwner := []Owner{{APIVersion: "vm.neon.tech/v1", Kind: "VirtualMachine", Name: "db", UID: "vm-uid"}}
	ann := func(v string) map[string]string { return map[string]string{vmsize.AnnotationCPU: v} }
	runner := &Size{MilliCPU: 4000, Source: "neonvm"}
	flag := Trust{Annotations: "team-a,team-b", TrustedBy: "--trust-size-annotations", Untrusted: "not in --trust-size-annotations",
		AllocatableMilliCPU: 2000}
	none := Trust{Untrusted: "the size policy is not installed", AllocatableMilliCPU: 2000}
	all := Trust{Annotations: AllNamespaces, TrustedBy: "the size policy is installed", AllocatableMilliCPU: 8000}
	existing := []VM{{Kind: "neonvm", Namespace: "team-a", Name: "db", UID: "vm-uid", MilliCPU: 1000, PodLabel: vmsize.LabelNeonVM}}
	attested := []VM{{Kind: "neonvm", Namespace: "team-a", Name: "db", UID: "vm-uid", MilliCPU: 1000, PodLabel: vmsize.LabelNeonVM, PodName: "p"}}
	cases := []struct {
		name  string
		trust Trust
		pod   Pod
		vms   []VM
		want  int64  // size taken (0: none)
		says  string // in Ignored, Capped or Via
	}{
		{name: "annotation, no trust", trust: none, pod: Pod{Namespace: "team-a", Annotation: ann("1")},
			says: "not trusted in namespace team-a: the size policy is not installed"},
		{name: "annotation, namespace listed", trust: flag, pod: Pod{Namespace: "team-b", Annotation: ann("1")}, want: 1000},
		{name: "annotation, namespace not listed", trust: flag, pod: Pod{Namespace: "team-c", Annotation: ann("1")},
			says: "not in --trust-size-annotations"},
		{name: "annotation, listed name is not a prefix", trust: flag, pod: Pod{Namespace: "team", Annotation: ann("1")}, says: "not trusted"},
		{name: "annotation, policy installed", trust: all, pod: Pod{Namespace: "any", Annotation: ann("2")}, want: 2000},
		{name: "annotation above allocatable is capped", trust: flag, pod: Pod{Namespace: "team-a", Annotation: ann("64")}, want: 2000,
			says: "capped at the node's allocatable CPU (2000m, declared 64000m)"},
		{name: "absurd annotation, trusted", trust: all, pod: Pod{Namespace: "n", Annotation: ann("1e12")}, says: "no node has"},
		{name: "zero annotation", trust: all, pod: Pod{Namespace: "n", Annotation: ann("0")}, says: "must be above 0"},
		{name: "garbage annotation", trust: all, pod: Pod{Namespace: "n", Annotation: ann("lots")}, says: "lots"},
		{name: "allocatable unknown: said, not invented", trust: Trust{Annotations: "*", AllocatableUnknown: "the Node object is not readable"},
			pod: Pod{Namespace: "n", Annotation: ann("64")}, want: 64000},
		// A pod's own arguments, owner references and labels are claims:
		// the API server checks none of them.
		{name: "-vmspec", trust: all, pod: Pod{Namespace: "team-a", VMSize: runner},
			says: "a pod's own arguments are not its size"},
		{name: "-vmspec, owner reference to a VM that names no pod", trust: all, pod: Pod{Namespace: "team-a", VMSize: runner, Owners: vmOwner},
			vms: existing, says: "claimed by the pod's ownerReferences) |  |  | not believed: its status names no pod"},
		{name: "owner reference, the VM's status names another pod", trust: all, pod: Pod{Namespace: "team-a", Owners: vmOwner},
			vms:  []VM{{Kind: "neonvm", Namespace: "team-a", Name: "db", UID: "vm-uid", MilliCPU: 1000, PodLabel: vmsize.LabelNeonVM, PodName: "db-runner"}},
			says: "its status names pod db-runner"},
		{name: "owner reference in another namespace", trust: all, pod: Pod{Namespace: "team-b", VMSize: runner, Owners: vmOwner}, vms: existing,
			says: "a pod's own arguments are not its size"},
		// The VM's status names the pod: its live size, over the -vmspec
		// the pod was started with, whatever the pod says of itself.
		{name: "-vmspec, VM names the pod", trust: all, pod: Pod{Namespace: "team-a", VMSize: runner}, vms: attested, want: 1000,
			says: "VM object NeonVM VirtualMachine team-a/db (its status names the pod)"},
		{name: "VM names the pod, capped", trust: Trust{AllocatableMilliCPU: 500}, pod: Pod{Namespace: "team-a", VMSize: runner, Owners: vmOwner},
			vms: attested, want: 500, says: "capped"},
		{name: "-vmspec not believed, trusted annotation taken", trust: flag, pod: Pod{Namespace: "team-a", VMSize: runner, Annotation: ann("1")},
			want: 1000},
		{name: "VM object, no annotation trust needed", trust: none, pod: Pod{Namespace: "team-a", Labels: map[string]string{vmsize.LabelNeonVM: "db"},
			Owners: vmOwner, Annotation: ann("64")}, vms: attested, want: 1000, says: "VM object NeonVM VirtualMachine team-a/db"},
		{name: "KubeVirt VMI, pod among its activePods", trust: none, pod: Pod{Namespace: "vms"},
			vms:  []VM{{Kind: "kubevirt", Namespace: "vms", Name: "big", MilliCPU: 2000, PodLabel: vmsize.LabelKubeVirt, PodUIDs: []string{"u"}}},
			want: 2000, says: "VM object KubeVirt VMI vms/big"},
		{name: "KubeVirt VMI, activePods names another pod", trust: all, pod: Pod{Namespace: "vms", Labels: map[string]string{vmsize.LabelKubeVirt: "big"},
			Owners: []Owner{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: "big"}}},
			vms:  []VM{{Kind: "kubevirt", Namespace: "vms", Name: "big", MilliCPU: 2000, PodLabel: vmsize.LabelKubeVirt, PodUIDs: []string{"other"}}},
			says: "its status names pods other"},
		{name: "VM label only", trust: all, pod: Pod{Namespace: "team-a", Labels: map[string]string{vmsize.LabelNeonVM: "db"}}, vms: existing,
			says: "claimed by the pod's label vm.neon.tech/name=db"},
		{name: "KubeVirt label only", trust: all, pod: Pod{Namespace: "vms", Labels: map[string]string{vmsize.LabelKubeVirt: "big"}},
			vms: []VM{{Kind: "kubevirt", Namespace: "vms", Name: "big", MilliCPU: 2000, PodLabel: vmsize.LabelKubeVirt}}, says: "kubevirt.io/domain=big"},
		// The operator's own file (VMs read by kubectl may carry no status).
		{name: "operator's file: VM label only", trust: OperatorTrust("the pods file"), pod: Pod{Namespace: "team-a",
			Labels: map[string]string{vmsize.LabelNeonVM: "db"}}, vms: existing, want: 1000, says: "the pods file"},
		{name: "operator's file: owner reference", trust: OperatorTrust("the pods file"), pod: Pod{Namespace: "team-a", Owners: vmOwner},
			vms: existing, want: 1000, says: "claimed by the pod's ownerReferences"},
		{name: "operator's file: -vmspec", trust: OperatorTrust("the pods file"), pod: Pod{Namespace: "n", VMSize: runner},
			want: 4000, says: "the pods file"},
		{name: "operator's file", trust: OperatorTrust("the pods file"), pod: Pod{Namespace: "n", Annotation: ann("3")}, want: 3000,
			says: "the pods file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.pod.UID, c.pod.Name = "u", "p"
			s := NewSet([]Pod{c.pod})
			s.SetTrust(c.trust)
			s.ApplyVMs(c.vms)
			o, ok := s.Origin("u")
			if !ok {
				t.Fatal("no origin for a pod that declares a size")
			}
			text := o.Via + " | " + o.Trusted + " | " + o.Capped + " | " + o.Ignored
			if !strings.Contains(text, c.says) {
				t.Errorf("origin %q does not say %q", text, c.says)
			}
			sz, sized, err := s.DeclaredSize("u")
			switch {
			case c.want == 0 && (sized || err == nil || o.Ignored == ""):
				t.Errorf("size %v taken (err %v, origin %+v), want none and a reason", sz, err, o)
			case c.want != 0 && (!sized || err != nil || sz.MilliCPU != c.want || o.MilliCPU != c.want):
				t.Errorf("size %v %v %v (origin %+v), want %dm", sz, sized, err, o, c.want)
			}
		})
	}
}

// TestVMSizeGoesToItsOwnPod: tenants' pods that claim a VM — its label,
// an owner reference with its UID, both — with lower UIDs than the VM's
// runner, do not take the VM's size from the runner its status names, nor
// get one themselves; each is told why.
func TestVMSizeGoesToItsOwnPod(t *testing.T) {
	vm := VM{Kind: "neonvm", Namespace: "team-a", Name: "db", UID: "vm-uid", MilliCPU: 3000, PodLabel: vmsize.LabelNeonVM, PodName: "db-runner"}
	label := map[string]string{vmsize.LabelNeonVM: "db"}
	owner := []Owner{{APIVersion: "vm.neon.tech/v1", Kind: "VirtualMachine", Name: "db", UID: "vm-uid"}}
	s := NewSet([]Pod{
		{UID: "a-labelled", Name: "impostor", Namespace: "team-a", Labels: label},
		{UID: "a-owned", Name: "impostor-2", Namespace: "team-a", Labels: label, Owners: owner, VMSize: &Size{MilliCPU: 64000, Source: "neonvm"}},
		{UID: "b-runner", Name: "db-runner", Namespace: "team-a", Labels: label, Owners: owner},
	})
	s.SetTrust(Trust{Annotations: AllNamespaces})
	if un := s.ApplyVMs([]VM{vm}); len(un) != 0 {
		t.Fatalf("unmatched %+v", un)
	}
	if sz, ok, err := s.DeclaredSize("b-runner"); !ok || err != nil || sz.MilliCPU != 3000 {
		t.Errorf("the runner's size: %v %v %v, want 3000m", sz, ok, err)
	}
	for _, uid := range []string{"a-labelled", "a-owned"} {
		if sz, ok, err := s.DeclaredSize(uid); ok || err == nil {
			t.Errorf("%s's size: %v %v %v, want none, with a reason", uid, sz, ok, err)
		}
	}
}

// An untrusted annotation leaves the audit's size to the pod's own
// requests or limits, as if it were not there.
func TestSizeIgnoresUntrusted(t *testing.T) {
	s := NewSet([]Pod{{UID: "u", Namespace: "n", Annotation: map[string]string{vmsize.AnnotationCPU: "64"}, RequestMilliCPU: ptr(100)}})
	s.SetTrust(Trust{})
	if sz, ok := s.Size("u"); !ok || sz != (Size{100, "requests"}) {
		t.Errorf("Size = %v %v, want the requests", sz, ok)
	}
	if got := s.Origins(); len(got) != 1 || got[0].Ignored == "" {
		t.Errorf("Origins = %+v, want the ignored annotation", got)
	}
}

func TestParseNamespaces(t *testing.T) {
	for in, want := range map[string]string{"": "", "*": "*", "b,a, b": "a,b", " team-a ": "team-a"} {
		if got, err := ParseNamespaces(in); err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"a,*", "Team", "a,,b", "a/b", strings.Repeat("x", 64)} {
		if got, err := ParseNamespaces(bad); err == nil {
			t.Errorf("%q accepted as %q", bad, got)
		}
	}
}

func TestTrustMerge(t *testing.T) {
	got := Trust{}.Merge("b,a", "flag").Merge("c", "other")
	if got.Annotations != "a,b,c" {
		t.Errorf("merged %q", got.Annotations)
	}
	if got := (Trust{Annotations: "a"}).Merge("*", "policy"); got.Annotations != "*" || got.TrustedBy != "policy" {
		t.Errorf("policy over a list: %+v", got)
	}
	if got := (Trust{Annotations: "*", TrustedBy: "policy"}).Merge("a", "flag"); got.Annotations != "*" || got.TrustedBy != "policy" {
		t.Errorf("list over the policy: %+v", got)
	}
}

// The namespace's --max-size bound caps every size believed for its
// pods as the node's allocatable CPU does (the lower of the two holds),
// and says so; other namespaces keep their sizes, or the "*" bound; a
// pods file (the operator's trust) is not bounded.
func TestOriginMaxSize(t *testing.T) {
	maxSizes := func(s string) vmsize.MaxSizes {
		m, err := vmsize.ParseMaxSizes(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// A VM of use 8 whose status names its runner, in each namespace.
	vmIn := func(ns string) VM {
		return VM{Kind: "neonvm", Namespace: ns, Name: "db", UID: "vm-uid", MilliCPU: 8000, PodLabel: vmsize.LabelNeonVM, PodName: "p"}
	}
	owner := []Owner{{APIVersion: "vm.neon.tech/v1", Kind: "VirtualMachine", Name: "db", UID: "vm-uid"}}
	tenant2 := maxSizes("tenant=2")
	cases := []struct {
		name   string
		trust  Trust
		ns     string
		ann    string // a cgwarden.io/cpu annotation instead of a VM
		want   int64
		capped string
	}{
		{name: "VM above its namespace's bound", trust: Trust{MaxSizes: tenant2, AllocatableMilliCPU: 64000}, ns: "tenant", want: 2000,
			capped: "capped at namespace tenant's --max-size bound tenant=2 (2000m, declared 8000m)"},
		{name: "allocatable unknown: the bound still holds", trust: Trust{MaxSizes: tenant2, AllocatableUnknown: "not read"}, ns: "tenant", want: 2000,
			capped: "namespace tenant's --max-size bound tenant=2"},
		{name: "another namespace: not bounded", trust: Trust{MaxSizes: tenant2, AllocatableMilliCPU: 64000}, ns: "other", want: 8000},
		{name: "another namespace: the * bound", trust: Trust{MaxSizes: maxSizes("tenant=2,*=4"), AllocatableMilliCPU: 64000}, ns: "other", want: 4000,
			capped: "capped at namespace other's --max-size bound *=4 (4000m, declared 8000m)"},
		{name: "a bound above the size", trust: Trust{MaxSizes: maxSizes("*=16")}, ns: "tenant", want: 8000},
		{name: "allocatable below the bound", trust: Trust{MaxSizes: maxSizes("tenant=6"), AllocatableMilliCPU: 3000}, ns: "tenant", want: 3000,
			capped: "capped at the node's allocatable CPU (3000m, declared 8000m)"},
		{name: "trusted annotation above the bound", trust: Trust{Annotations: AllNamespaces, MaxSizes: tenant2}, ns: "tenant", ann: "64", want: 2000,
			capped: "capped at namespace tenant's --max-size bound tenant=2 (2000m, declared 64000m)"},
		{name: "the operator's pods file: not bounded", trust: OperatorTrust("the pods file"), ns: "tenant", ann: "64", want: 64000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Pod{UID: "u", Name: "p", Namespace: c.ns, Owners: owner}
			if c.ann != "" {
				p.Owners, p.Annotation = nil, map[string]string{vmsize.AnnotationCPU: c.ann}
			}
			s := NewSet([]Pod{p})
			s.SetTrust(c.trust)
			if c.ann == "" {
				s.ApplyVMs([]VM{vmIn(c.ns)})
			}
			o, _ := s.Origin("u")
			sz, ok, err := s.DeclaredSize("u")
			if !ok || err != nil || sz.MilliCPU != c.want || o.MilliCPU != c.want {
				t.Fatalf("size %v %v %v (origin %+v), want %dm", sz, ok, err, o, c.want)
			}
			if (c.capped == "") != (o.Capped == "") || !strings.Contains(o.Capped, c.capped) {
				t.Errorf("capped %q, want %q", o.Capped, c.capped)
			}
		})
	}
}
