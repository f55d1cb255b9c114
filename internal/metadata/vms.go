package metadata

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// VM is a virtual machine's declared CPU size, as read from its custom
// resource, and how its pod is found.
type VM struct {
	// Kind is "neonvm" (vm.neon.tech VirtualMachine) or "kubevirt"
	// (kubevirt.io VirtualMachineInstance); it becomes Size.Source.
	Kind      string
	Namespace string
	Name      string
	MilliCPU  int64
	// PodLabel is the label (key=Name) that marks the VM's pod.
	PodLabel string
	// PodName is the pod named by the VM's status, if any (NeonVM's
	// status.podName).
	PodName string
	// UID is the object's metadata.uid ("" when the file has none).
	UID string
	// PodUIDs are the pods the VM's status names by UID (KubeVirt's
	// status.activePods), sorted; nil when none.
	PodUIDs []string
}

// Equal reports whether two reads of a VM object say the same.
func (vm VM) Equal(o VM) bool {
	return vm.Kind == o.Kind && vm.Namespace == o.Namespace && vm.Name == o.Name && vm.MilliCPU == o.MilliCPU &&
		vm.PodLabel == o.PodLabel && vm.PodName == o.PodName && vm.UID == o.UID && slices.Equal(vm.PodUIDs, o.PodUIDs)
}

// Labels that tie a VM's pod to the VM.
const (
	LabelNeonVM   = "vm.neon.tech/name"
	LabelKubeVirt = "kubevirt.io/domain"
)

// VMOf says by its labels whether a pod runs a VM, and which: the VM's
// kind ("NeonVM", "KubeVirt VMI") and name. p may be nil.
func VMOf(p *Pod) (kind, name string, ok bool) {
	if p == nil {
		return "", "", false
	}
	if v, ok := p.Labels[LabelNeonVM]; ok {
		return "NeonVM", v, true
	}
	if v, ok := p.Labels[LabelKubeVirt]; ok {
		return "KubeVirt VMI", v, true
	}
	return "", "", false
}

// VMRef names one VM object a pod depends on for its size: kind as in
// VM.Kind ("neonvm", "kubevirt"), the pod's namespace, the object's name.
type VMRef struct {
	Kind, Namespace, Name string
}

// VMRefs lists the VM objects whose sizes bear on pod p, the ones the
// agent must read to size it as the VM objects it would match (ApplyVMs,
// Origin): the NeonVM VirtualMachine its vm.neon.tech/name label names,
// the NeonVM VirtualMachine that owns it (a runner's -vmspec is believed
// only when that owner exists), and the KubeVirt VMI its
// kubevirt.io/domain label names. Sorted, without repeats; nil for a pod
// that runs no VM.
func VMRefs(p *Pod) []VMRef {
	var out []VMRef
	if v := p.Labels[LabelNeonVM]; v != "" {
		out = append(out, VMRef{"neonvm", p.Namespace, v})
	}
	if o := p.neonVMOwner(); o != nil {
		out = append(out, VMRef{"neonvm", p.Namespace, o.Name})
	}
	if v := p.Labels[LabelKubeVirt]; v != "" {
		out = append(out, VMRef{"kubevirt", p.Namespace, v})
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
// The custom resources are decoded as unstructured objects, so no CRD Go
// types are needed; only the fields cgwarden uses are read:
//   - NeonVM (vm.neon.tech/v1 VirtualMachine): spec.guest.cpus.use (the
//     live size) held within .min and .max, else .max, else .min — milli-CPU quantities written "250m", 0.25 or 4;
//     the runner pod is owned by the VM, carries the label
//     vm.neon.tech/name=<VM>, and status.podName names it.
//   - KubeVirt (kubevirt.io/v1 VirtualMachineInstance): vCPUs =
//     spec.domain.cpu.sockets × cores × threads, each defaulting to 1 as
//     KubeVirt does; the virt-launcher pod is owned by the VMI, carries
//     kubevirt.io/domain=<VMI>, and status.activePods names its UID.
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
		vm, err := parseVM(unstructured.Unstructured{Object: m})
		if err != nil {
			return nil, fmt.Errorf("VMs file: item %d: %w", i, err)
		}
		out = append(out, vm)
	}
	return out, nil
}

// ReadVMsFile reads a file ParseVMs understands; errors name the file.
func ReadVMsFile(name string) ([]VM, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	vms, err := ParseVMs(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return vms, nil
}

// VMFromObject reads one VM object (a NeonVM VirtualMachine or a KubeVirt
// VirtualMachineInstance, as a dynamic client returns it), as ParseVMs
// reads each item.
func VMFromObject(obj map[string]any) (VM, error) {
	return parseVM(unstructured.Unstructured{Object: obj})
}

func parseVM(u unstructured.Unstructured) (VM, error) {
	group, _, _ := strings.Cut(u.GetAPIVersion(), "/")
	id := fmt.Sprintf("%s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
	if u.GetName() == "" {
		return VM{}, fmt.Errorf("%s has no metadata.name", u.GetKind())
	}
	vm := VM{Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID())}
	switch {
	case group == "vm.neon.tech" && u.GetKind() == "VirtualMachine":
		vm.Kind, vm.PodLabel = "neonvm", LabelNeonVM
		// use is the live size (the autoscaler changes it); min and max
		// bound it, and stand in for it when it is absent.
		cpus := map[string]int64{}
		for _, f := range []string{"use", "max", "min"} {
			v, ok, err := unstructured.NestedFieldNoCopy(u.Object, "spec", "guest", "cpus", f)
			if err != nil || !ok || v == nil {
				continue
			}
			m, err := milliOf(v)
			if err != nil {
				return VM{}, fmt.Errorf("%s: spec.guest.cpus.%s: %w", id, f, err)
			}
			cpus[f] = m
		}
		lo, hasMin := cpus["min"]
		hi, hasMax := cpus["max"]
		if hasMin && hasMax && lo > hi {
			return VM{}, fmt.Errorf("%s: spec.guest.cpus.min %dm is above max %dm", id, lo, hi)
		}
		use, hasUse := cpus["use"]
		switch {
		case hasUse:
			if hasMax {
				use = min(use, hi)
			}
			if hasMin {
				use = max(use, lo)
			}
			vm.MilliCPU = use
		case hasMax:
			vm.MilliCPU = hi
		case hasMin:
			vm.MilliCPU = lo
		default:
			return VM{}, fmt.Errorf("%s: no spec.guest.cpus.use, max or min", id)
		}
		vm.PodName, _, _ = unstructured.NestedString(u.Object, "status", "podName")
	case group == "kubevirt.io" && u.GetKind() == "VirtualMachineInstance":
		vm.Kind, vm.PodLabel = "kubevirt", LabelKubeVirt
		vcpus := int64(1)
		for _, f := range []string{"sockets", "cores", "threads"} {
			v, ok, err := unstructured.NestedFieldNoCopy(u.Object, "spec", "domain", "cpu", f)
			if err != nil || !ok || v == nil {
				continue
			}
			n, ok := v.(float64)
			if i, isInt := v.(int64); isInt { // a dynamic client's decoding
				n, ok = float64(i), true
			}
			if !ok || n < 1 || n != float64(int64(n)) || n > 4096 {
				return VM{}, fmt.Errorf("%s: spec.domain.cpu.%s is %v, want a whole number from 1 to 4096", id, f, v)
			}
			vcpus *= int64(n)
		}
		vm.MilliCPU = vcpus * 1000
		// status.activePods: {<pod UID>: <node>}, written by virt-controller.
		active, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "activePods")
		uids, _ := active.(map[string]any)
		for uid := range uids {
			vm.PodUIDs = append(vm.PodUIDs, uid)
		}
		slices.Sort(vm.PodUIDs)
	default:
		return VM{}, fmt.Errorf("%s (%s) is neither a NeonVM VirtualMachine (vm.neon.tech/v1) nor a KubeVirt VirtualMachineInstance (kubevirt.io/v1)",
			id, u.GetAPIVersion())
	}
	if vm.MilliCPU <= 0 {
		return VM{}, fmt.Errorf("%s: CPU size %dm is not positive", id, vm.MilliCPU)
	}
	return vm, nil
}

// milliOf reads a quantity written as a string ("250m", "4") or a JSON
// number (0.25, 4).
func milliOf(v any) (int64, error) {
	switch x := v.(type) {
	case string:
		return Quantity(x)
	case float64:
		return Quantity(strconv.FormatFloat(x, 'f', -1, 64))
	case int64: // a dynamic client's decoding of an integral JSON number
		return Quantity(strconv.FormatInt(x, 10))
	case int:
		return Quantity(strconv.Itoa(x))
	}
	return 0, fmt.Errorf("%v is neither a quantity string nor a number", v)
}

// ApplyVMs records each VM's size on its pod, the pod in the VM's
// namespace found, best first, as
//   - owned by the VM (an ownerReference to it, with its UID when both
//     are known): only the VM's controller makes such pods;
//   - named by the VM's status (NeonVM status.podName, KubeVirt
//     status.activePods), which only its controller writes;
//   - carrying the VM's label (vm.neon.tech/name or kubevirt.io/domain):
//     any pod can, so the size is believed only under a trust that
//     believes what pods say of themselves (Trust.PodClaims: the
//     operator's own pods file); Origin says so.
//
// Of two pods found alike, the one with the lower UID. VMs whose pod is
// not in the set are returned. Every VM is remembered as existing, for
// the runner pods its NeonVM VirtualMachines own (see Origin).
func (s *Set) ApplyVMs(vms []VM) (unmatched []VM) {
	if s == nil {
		return vms
	}
	for _, vm := range vms {
		s.vms[vmKey(vm.Kind, vm.Namespace, vm.Name)] = vm.UID
		var pod *Pod
		best := matchNone
		for _, p := range s.byUID {
			if p.Namespace != vm.Namespace {
				continue
			}
			m := vm.matches(p)
			if m > best || (m == best && m != matchNone && p.UID < pod.UID) { // deterministic if two match
				pod, best = p, m
			}
		}
		if pod == nil {
			unmatched = append(unmatched, vm)
			continue
		}
		s.SetSize(pod.UID, Size{MilliCPU: vm.MilliCPU, Source: vm.Kind})
		kind := "NeonVM VirtualMachine"
		if vm.Kind == "kubevirt" {
			kind = "KubeVirt VMI"
		}
		s.via[pod.UID] = kind + " " + vm.Namespace + "/" + vm.Name
		delete(s.byLabel, pod.UID)
		if best == matchLabel {
			s.byLabel[pod.UID] = vm.PodLabel + "=" + vm.Name
		}
	}
	return unmatched
}

// How a VM's pod is found, worst to best (ApplyVMs).
const (
	matchNone = iota
	matchLabel
	matchStatus
	matchOwner
)

// matches says how pod p (in the VM's namespace) is tied to the VM.
func (vm VM) matches(p *Pod) int {
	group, kind := "vm.neon.tech", "VirtualMachine"
	if vm.Kind == "kubevirt" {
		group, kind = "kubevirt.io", "VirtualMachineInstance"
	}
	for _, o := range p.Owners {
		g, _, _ := strings.Cut(o.APIVersion, "/")
		if g == group && o.Kind == kind && o.Name == vm.Name && (vm.UID == "" || o.UID == "" || o.UID == vm.UID) {
			return matchOwner
		}
	}
	if (vm.PodName != "" && p.Name == vm.PodName) || slices.Contains(vm.PodUIDs, p.UID) {
		return matchStatus
	}
	if v, ok := p.Labels[vm.PodLabel]; ok && v == vm.Name {
		return matchLabel
	}
	return matchNone
}

// vmKey names a VM object in Set.vms.
func vmKey(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// runnerVMSize reads a NeonVM runner pod's own statement of its VM's size:
// the controller starts the runner with "-vmspec <base64 JSON of the
// VirtualMachine spec>" (neondatabase/autoscaling, neonvm controller), so
// `kubectl get pods -o json` alone carries spec.guest.cpus. Anything that
// does not decode is ignored: the VMs file remains the authority.
func runnerVMSize(k *corev1.Pod) *Size {
	if _, ok := k.Labels[LabelNeonVM]; !ok {
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
			for _, f := range []string{"use", "max", "min"} {
				v, ok, err := unstructured.NestedFieldNoCopy(spec, "guest", "cpus", f)
				if err != nil || !ok || v == nil {
					continue
				}
				if m, err := milliOf(v); err == nil && m > 0 {
					return &Size{MilliCPU: m, Source: "neonvm"}
				}
				return nil
			}
		}
	}
	return nil
}
