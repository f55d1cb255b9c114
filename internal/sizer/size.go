package sizer

import (
	"fmt"

	"github.com/cgwarden/cgwarden/internal/vmsize"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// VMSize is a NeonVM VirtualMachine's size for a request, in milli-CPU:
// the size policy's Request mode (vmsize.Request), spec.guest.cpus.use
// within .min and .max. Unlike the agent's weights it does not fall back
// to max or min: a request is a promise to the scheduler, so only the
// size the VM runs at now is used; a VM without one is not sized.
func VMSize(vm *unstructured.Unstructured) (int64, error) {
	v, err := vmsize.FromObject(vm.Object, vmsize.Request)
	return v.MilliCPU, err
}

// AnnotationSize reads a cgwarden.io/cpu value in milli-CPU.
func AnnotationSize(s string) (int64, error) {
	m, err := vmsize.Quantity(s)
	if err == nil {
		err = vmsize.Check(m)
	}
	if err != nil {
		return 0, fmt.Errorf("annotation %s: %w", vmsize.AnnotationCPU, err)
	}
	return m, nil
}

// FormatMilli writes milli-CPU as the API server would ("1", "1500m"):
// the size policy's (vmsize.FormatMilli).
func FormatMilli(m int64) string { return vmsize.FormatMilli(m) }
