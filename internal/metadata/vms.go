package metadata

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// VM is a VM object's size and the pod its controller names (the one
// size policy, internal/vmsize).
type VM = vmsize.VM

// VMOf says by its labels whether a pod runs a VM, and which: the VM's
// kind ("NeonVM", "KubeVirt VMI") and name. p may be nil.
func VMOf(p *Pod) (kind, name string, ok bool) {
	if p == nil {
		return "", "", false
	}
	if v, ok := p.Labels[vmsize.LabelNeonVM]; ok {
		return "NeonVM", v, true
	}
	if v, ok := p.Labels[vmsize.LabelKubeVirt]; ok {
		return "KubeVirt VMI", v, true
	}
	return "", "", false
}

// VMRef names one VM object a pod depends on for its size: kind as in
// VM.Kind ("neonvm", "kubevirt"), the pod's namespace, the object's name.
type VMRef struct {
	Kind, Namespace, Name string
}

// VMRefs lists the VM objects pod p claims (its vm.neon.tech/name and
// kubevirt.io/domain labels, its NeonVM VirtualMachine owner reference):
// the ones the agent reads to learn whether they name p (ApplyVMs). A
// claim is only where to look; the VM's status decides. Sorted, without repeats; nil for a pod
// that runs no VM.
func VMRefs(p *Pod) []VMRef {
	var out []VMRef
	if v := p.Labels[vmsize.LabelNeonVM]; v != "" {
		out = append(out, VMRef{vmsize.NeonVM, p.Namespace, v})
	}
	if o := p.neonVMOwner(); o != nil {
		out = append(out, VMRef{vmsize.NeonVM, p.Namespace, o.Name})
	}
	if v := p.Labels[vmsize.LabelKubeVirt]; v != "" {
		out = append(out, VMRef{vmsize.KubeVirt, p.Namespace, v})
	}
	if len(out) < 2 {
		return out
	}
	slices.SortFunc(out, func(a, b VMRef) int {
		return strings.Compare(a.Kind+"/"+a.Name, b.Kind+"/"+b.Name)
	})
	return slices.Compact(out)
}

// ParseVMs reads `kubectl get virtualmachines.vm.neon.tech -A -o json`,
// `kubectl get vmis -A -o json`, a List holding both, or one such object.
// Each object is read as vmsize.FromObject reads it, at its live size.
func ParseVMs(r io.Reader) ([]VM, error) {
	raw, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("VMs file: %w", err)
	}
	if len(raw) > MaxFileBytes {
		return nil, fmt.Errorf("VMs file: larger than %d MiB", MaxFileBytes>>20)
	}
	var top map[string]any
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("VMs file: not a JSON object: %w", err)
	}
	obj := unstructured.Unstructured{Object: top}
	var items []map[string]any
	if strings.HasSuffix(obj.GetKind(), "List") {
		list, found, err := unstructured.NestedSlice(top, "items")
		if err != nil {
			return nil, fmt.Errorf("VMs file: items: %w", err)
		}
		if !found {
			return nil, fmt.Errorf("VMs file: a %s without items", obj.GetKind())
		}
		for i, it := range list {
			m, ok := it.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("VMs file: item %d is not an object", i)
			}
			items = append(items, m)
		}
	} else {
		items = []map[string]any{top}
	}
	out := make([]VM, 0, len(items))
	for i, m := range items {
		vm, err := vmsize.FromObject(m, vmsize.Live)
		if err != nil {
			return nil, fmt.Errorf("VMs file: item %d: %w", i, err)
		}
		out = append(out, vm)
	}
	return out, nil
}

// ReadVMsFile reads a file ParseVMs understands; errors name the file.
func ReadVMsFile(name string) ([]VM, error) { return readFile(name, ParseVMs) }

// ApplyVMs records each VM's size on the pod of the set that the VM's
// status names (vmsize.VM.Attests): only the VM's controller writes it.
// A pod that only claims the VM — an owner reference or the VM's label,
// which anyone who can create a pod can write — is given nothing, and
// Origin says why; unless the Set's trust believes what pods say of
// themselves (Trust.PodClaims: the operator's own pods file, whose VMs may
// carry no status), when the best claim stands in for the status (an owner
// reference before a label; of two alike, the lower UID). One pod per VM:
// every other pod that claims it is told which pod holds it.
// VMs no pod of the set is tied to are returned.
func (s *Set) ApplyVMs(vms []VM) (unmatched []VM) {
	if s == nil {
		return vms
	}
	for _, vm := range vms {
		var pod *Pod
		best := matchNone
		var claimants []*Pod
		for _, p := range s.byUID {
			m := match(vm, p)
			if m == matchOwner || m == matchLabel {
				claimants = append(claimants, p)
			}
			if m > best || (m == best && m != matchNone && p.UID < pod.UID) { // deterministic if two match
				pod, best = p, m
			}
		}
		if pod == nil {
			unmatched = append(unmatched, vm)
			continue
		}
		if best == matchStatus {
			s.SetSize(pod.UID, Size{MilliCPU: vm.MilliCPU, Source: vm.Kind})
			s.via[pod.UID] = vm.ID()
			delete(s.claims, pod.UID)
		}
		why := "its status names no pod"
		switch {
		case best == matchStatus:
			why = "its status names pod " + pod.Name
		case vm.PodName != "":
			why = "its status names pod " + vm.PodName
		case len(vm.PodUIDs) > 0:
			why = "its status names pods " + strings.Join(vm.PodUIDs, ", ")
		}
		for _, p := range claimants {
			if _, attested := s.sizes[p.UID]; attested {
				continue // its own VM names it: a second VM's claim adds nothing
			}
			c := claim{vm: vm, how: "ownerReferences", why: why, second: p != pod}
			if match(vm, p) == matchLabel {
				c.how = "label " + vm.PodLabel + "=" + vm.Name
			}
			if c.second && best != matchStatus {
				c.why += fmt.Sprintf("; pod %s claims it first (one pod per VM)", pod.Name)
			}
			s.claims[p.UID] = c
		}
	}
	return unmatched
}

// claim is a VM a pod names itself (ownerReferences, a label) but whose
// status does not name the pod.
type claim struct {
	vm VM
	// how the pod claims it; why the VM does not back the claim.
	how, why string
	// second: another pod holds the VM (named by its status, or the
	// better claim), so not even the operator's file makes it this pod's.
	second bool
}

// How a VM's pod is found, worst to best (ApplyVMs).
const (
	matchNone = iota
	matchLabel
	matchOwner
	matchStatus
)

// match says how pod p is tied to vm: named by its status (the only tie
// that gives a size outside the operator's own files), or claiming it by
// an owner reference or its label.
func match(vm VM, p *Pod) int {
	if p.Namespace != vm.Namespace {
		return matchNone
	}
	if vm.Attests(p.Namespace, p.Name, p.UID) {
		return matchStatus
	}
	for _, o := range p.Owners {
		if vmsize.OwnerKind(o.APIVersion, o.Kind) == vm.Kind && o.Name == vm.Name && (vm.UID == "" || o.UID == "" || o.UID == vm.UID) {
			return matchOwner
		}
	}
	if v, ok := p.Labels[vm.PodLabel]; ok && v == vm.Name {
		return matchLabel
	}
	return matchNone
}

// runnerVMSize reads a NeonVM runner pod's own statement of its VM's size:
// the controller starts the runner with "-vmspec <base64 JSON of the
// VirtualMachine spec>" (neondatabase/autoscaling, neonvm controller), so
// `kubectl get pods -o json` alone carries spec.guest.cpus. Anything that
// does not decode is ignored: the VMs file remains the authority.
func runnerVMSize(k *corev1.Pod) *Size {
	if _, ok := k.Labels[vmsize.LabelNeonVM]; !ok {
		return nil
	}
	for _, c := range k.Spec.Containers {
		argv := append(append([]string{}, c.Command...), c.Args...)
		for i := 0; i+1 < len(argv); i++ {
			if argv[i] != "-vmspec" && argv[i] != "--vmspec" {
				continue
			}
			raw, err := base64.StdEncoding.DecodeString(argv[i+1])
			if err != nil {
				return nil
			}
			var spec map[string]any
			if json.Unmarshal(raw, &spec) != nil {
				return nil
			}
			// Read as the VM object is: the runner's spec is the VM's.
			vm, err := vmsize.FromObject(map[string]any{"apiVersion": vmsize.NeonVMGroup + "/v1", "kind": "VirtualMachine",
				"metadata": map[string]any{"name": "-vmspec"}, "spec": spec}, vmsize.Live)
			if err != nil {
				return nil
			}
			return &Size{MilliCPU: vm.MilliCPU, Source: vmsize.NeonVM}
		}
	}
	return nil
}
