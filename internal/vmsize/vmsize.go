package vmsize

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Names cgwarden reads on pods and VM objects.
const (
	// AnnotationCPU on a pod declares its real CPU size ("2", "500m").
	AnnotationCPU = "cgwarden.io/cpu"
	// AnnotationContainer names the container of a sized pod that runs the
	// VM, when the VM kind's own container name does not tell.
	AnnotationContainer = "cgwarden.io/cpu-container"
	// LabelNeonVM and LabelKubeVirt mark a VM's pod with the VM's name.
	LabelNeonVM   = "vm.neon.tech/name"
	LabelKubeVirt = "kubevirt.io/domain"
	// NeonVMGroup and KubeVirtGroup are the VM operators' API groups.
	NeonVMGroup   = "vm.neon.tech"
	KubeVirtGroup = "kubevirt.io"
)

// Kinds of VM object, as VM.Kind and a Size's source name them.
const (
	NeonVM   = "neonvm"   // vm.neon.tech/v1 VirtualMachine
	KubeVirt = "kubevirt" // kubevirt.io/v1 VirtualMachineInstance
)

// RunnerContainer is the container each VM kind runs its VM in: NeonVM's
// runner pod's neonvm-runner, KubeVirt's virt-launcher's compute.
var RunnerContainer = map[string]string{NeonVM: "neonvm-runner", KubeVirt: "compute"}

// MaxMilliCPU is the largest size cgwarden believes: 8192 CPUs, the
// NR_CPUS Debian's amd64 kernels are built with. A larger annotation or VM
// size is a typo or hostile input, not a machine.
const MaxMilliCPU = 8192 * 1000

// VM is a virtual machine's CPU size, as read from its object, and the pod
// its controller says runs it.
type VM struct {
	// Kind is NeonVM or KubeVirt.
	Kind      string
	Namespace string
	Name      string
	MilliCPU  int64
	// PodLabel is the label (key=Name) the VM's pod carries.
	PodLabel string
	// PodName is the pod NeonVM's status.podName names ("" when none).
	PodName string
	// UID is the object's metadata.uid ("" when the file has none).
	UID string
	// PodUIDs are the pods KubeVirt's status.activePods names by UID,
	// sorted; nil when none.
	PodUIDs []string
}

// Equal reports whether two reads of a VM object say the same.
func (vm VM) Equal(o VM) bool {
	return vm.Kind == o.Kind && vm.Namespace == o.Namespace && vm.Name == o.Name && vm.MilliCPU == o.MilliCPU &&
		vm.PodLabel == o.PodLabel && vm.PodName == o.PodName && vm.UID == o.UID && slices.Equal(vm.PodUIDs, o.PodUIDs)
}

// ID names the VM for messages: "NeonVM VirtualMachine ns/name".
func (vm VM) ID() string {
	kind := "NeonVM VirtualMachine"
	if vm.Kind == KubeVirt {
		kind = "KubeVirt VMI"
	}
	return kind + " " + vm.Namespace + "/" + vm.Name
}

// Attests reports whether the VM's controller names the pod (namespace,
// name, uid) as the VM's: NeonVM's status.podName, KubeVirt's
// status.activePods. Only the controller writes a VM's status (tenants are
// refused the status subresource); that is what makes a size the pod's.
// KubeVirt names two pods during a live migration, each on its own node.
func (vm VM) Attests(namespace, name, uid string) bool {
	if namespace != vm.Namespace {
		return false
	}
	return (vm.PodName != "" && name == vm.PodName) || (uid != "" && slices.Contains(vm.PodUIDs, uid))
}

// Mode says which of a NeonVM VirtualMachine's CPU fields make its size.
type Mode int

const (
	// Live is the size the VM is held at: spec.guest.cpus.use within .min
	// and .max, else .max, else .min. The agent weighs by it.
	Live Mode = iota
	// Request is the size a request may promise the scheduler: .use
	// within .min and .max, and only .use — a VM that states no live size
	// is not sized. The sizer requests by it.
	Request
)

// FromObject reads one VM object (a NeonVM VirtualMachine or a KubeVirt
// VirtualMachineInstance, as a dynamic client or a JSON file gives it).
// Only the fields cgwarden uses are read:
//   - NeonVM (vm.neon.tech/v1 VirtualMachine): spec.guest.cpus (see Mode)
//     as milli-CPU quantities written "250m", 0.25 or 4; status.podName.
//   - KubeVirt (kubevirt.io/v1 VirtualMachineInstance): vCPUs =
//     spec.domain.cpu.sockets × cores × threads, each defaulting to 1 as
//     KubeVirt does; status.activePods (pod UID → node).
func FromObject(obj map[string]any, mode Mode) (VM, error) {
	u := unstructured.Unstructured{Object: obj}
	group, _, _ := strings.Cut(u.GetAPIVersion(), "/")
	id := fmt.Sprintf("%s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
	if u.GetName() == "" {
		return VM{}, fmt.Errorf("%s has no metadata.name", u.GetKind())
	}
	vm := VM{Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID())}
	switch {
	case group == NeonVMGroup && u.GetKind() == "VirtualMachine":
		vm.Kind, vm.PodLabel = NeonVM, LabelNeonVM
		m, err := neonVMSize(obj, mode)
		if err != nil {
			return VM{}, fmt.Errorf("%s: %w", id, err)
		}
		vm.MilliCPU = m
		vm.PodName, _, _ = unstructured.NestedString(obj, "status", "podName")
	case group == KubeVirtGroup && u.GetKind() == "VirtualMachineInstance":
		vm.Kind, vm.PodLabel = KubeVirt, LabelKubeVirt
		vcpus := int64(1)
		for _, f := range []string{"sockets", "cores", "threads"} {
			v, ok, err := unstructured.NestedFieldNoCopy(obj, "spec", "domain", "cpu", f)
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
		active, _, _ := unstructured.NestedFieldNoCopy(obj, "status", "activePods")
		uids, _ := active.(map[string]any)
		vm.PodUIDs = slices.Sorted(maps.Keys(uids))
	default:
		return VM{}, fmt.Errorf("%s (%s) is neither a NeonVM VirtualMachine (vm.neon.tech/v1) nor a KubeVirt VirtualMachineInstance (kubevirt.io/v1)",
			id, u.GetAPIVersion())
	}
	if err := Check(vm.MilliCPU); err != nil {
		return VM{}, fmt.Errorf("%s: %w", id, err)
	}
	return vm, nil
}

// neonVMSize reads spec.guest.cpus as mode says.
func neonVMSize(obj map[string]any, mode Mode) (int64, error) {
	cpus := map[string]int64{}
	for _, f := range []string{"use", "max", "min"} {
		v, ok, err := unstructured.NestedFieldNoCopy(obj, "spec", "guest", "cpus", f)
		if err != nil || !ok || v == nil {
			continue
		}
		m, err := milliOf(v)
		if err != nil {
			return 0, fmt.Errorf("spec.guest.cpus.%s: %w", f, err)
		}
		cpus[f] = m
	}
	lo, hasMin := cpus["min"]
	hi, hasMax := cpus["max"]
	if hasMin && hasMax && lo > hi {
		return 0, fmt.Errorf("spec.guest.cpus.min %dm is above max %dm", lo, hi)
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
		return use, nil
	case mode == Request:
		return 0, fmt.Errorf("no spec.guest.cpus.use: a request is made only from the size the VM runs at")
	case hasMax:
		return hi, nil
	case hasMin:
		return lo, nil
	}
	return 0, fmt.Errorf("no spec.guest.cpus.use, max or min")
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

// hugeExponent finds a quantity with an exponent of four digits or more:
// apimachinery's resource.ParseQuantity computes such a number in full
// ("9e2337203372" does not return), so hostile input must not reach it.
// The API server never stores one: no resource is that large or small.
var hugeExponent = regexp.MustCompile(`^\s*[+-]?[0-9.]+[eE][-+]?[0-9]{4,}\s*$`)

// Quantity reads a CPU quantity ("2", "500m", "1.5") in milli-CPU.
func Quantity(s string) (int64, error) {
	if len(s) > 64 || hugeExponent.MatchString(s) {
		return 0, fmt.Errorf("CPU quantity %.64q: too long or too large an exponent for a CPU size", s)
	}
	q, err := resource.ParseQuantity(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("CPU quantity %q: %w", s, err)
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("CPU quantity %q is negative", s)
	}
	return q.MilliValue(), nil
}

// Check refuses a size no pod can have: zero or below, or above
// MaxMilliCPU.
func Check(m int64) error {
	switch {
	case m <= 0:
		return fmt.Errorf("%dm: a size must be above 0", m)
	case m > MaxMilliCPU:
		return fmt.Errorf("%dm: above %d CPUs, which no node has", m, MaxMilliCPU/1000)
	}
	return nil
}

// Container picks, of a sized pod's containers (names, in the pod's
// order), the one that runs the VM: the one the cgwarden.io/cpu-container
// annotation names, else the one the VM kind runs its VM in
// (RunnerContainer), else the pod's only container. The error says why
// none can be told.
func Container(names []string, kind string, annotations map[string]string) (int, error) {
	if want, ok := annotations[AnnotationContainer]; ok {
		if i := slices.Index(names, want); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("annotation %s names container %q, which the pod does not have", AnnotationContainer, want)
	}
	if want := RunnerContainer[kind]; want != "" {
		if i := slices.Index(names, want); i >= 0 {
			return i, nil
		}
	}
	switch len(names) {
	case 1:
		return 0, nil
	case 0:
		return 0, fmt.Errorf("no container")
	}
	runner := "neonvm-runner or compute"
	if r := RunnerContainer[kind]; r != "" {
		runner = r
	}
	return 0, fmt.Errorf("%d containers, none named %s: say which with annotation %s", len(names), runner, AnnotationContainer)
}

// OwnerKind says which kind of VM object an owner reference names (NeonVM
// for a vm.neon.tech VirtualMachine, KubeVirt for a kubevirt.io
// VirtualMachineInstance), and "" for any other owner.
func OwnerKind(apiVersion, kind string) string {
	group, _, _ := strings.Cut(apiVersion, "/")
	switch {
	case group == NeonVMGroup && kind == "VirtualMachine":
		return NeonVM
	case group == KubeVirtGroup && kind == "VirtualMachineInstance":
		return KubeVirt
	}
	return ""
}
