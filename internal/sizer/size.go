package sizer

import (
	"fmt"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

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
