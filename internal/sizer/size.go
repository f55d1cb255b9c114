package sizer

import (
	"errors"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// VMSize reads a NeonVM VirtualMachine's live size, spec.guest.cpus.use, in
// milli-CPU. Unlike metadata.ParseVMs it does not fall back to max or min:
// a request is a promise to the scheduler, so only the size the VM runs at
// now is used; a VM without one is not sized.
func VMSize(vm *unstructured.Unstructured) (int64, error) {
	v, ok, err := unstructured.NestedFieldNoCopy(vm.Object, "spec", "guest", "cpus", "use")
	if err != nil {
		return 0, fmt.Errorf("VirtualMachine %s/%s: spec.guest.cpus.use: %w", vm.GetNamespace(), vm.GetName(), err)
	}
	if !ok || v == nil {
		return 0, fmt.Errorf("VirtualMachine %s/%s has no spec.guest.cpus.use", vm.GetNamespace(), vm.GetName())
	}
	var m int64
	switch x := v.(type) {
	case string:
		m, err = metadata.Quantity(x)
	case float64:
		m, err = metadata.Quantity(strconv.FormatFloat(x, 'f', -1, 64))
	case int64:
		m, err = metadata.Quantity(strconv.FormatInt(x, 10))
	default:
		err = fmt.Errorf("%v is neither a quantity string nor a number", v)
	}
	if err == nil {
		err = checkMilli(m)
	}
	if err != nil {
		return 0, fmt.Errorf("VirtualMachine %s/%s: spec.guest.cpus.use: %w", vm.GetNamespace(), vm.GetName(), err)
	}
	return m, nil
}

// AnnotationSize reads a cgwarden.io/cpu value in milli-CPU.
func AnnotationSize(s string) (int64, error) {
	m, err := metadata.Quantity(s)
	if err == nil {
		err = checkMilli(m)
	}
	if err != nil {
		return 0, fmt.Errorf("annotation %s: %w", AnnotationCPU, err)
	}
	return m, nil
}

var errZero = errors.New("zero CPU: nothing to request")

func checkMilli(m int64) error {
	switch {
	case m <= 0:
		return errZero
	case m > metadata.MaxSizeMilliCPU:
		return fmt.Errorf("%dm is above %d CPUs, more than any node has", m, metadata.MaxSizeMilliCPU/1000)
	}
	return nil
}

// FormatMilli writes milli-CPU as the API server would ("1", "1500m").
func FormatMilli(m int64) string {
	if m%1000 == 0 {
		return strconv.FormatInt(m/1000, 10)
	}
	return strconv.FormatInt(m, 10) + "m"
}
