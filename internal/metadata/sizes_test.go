package metadata

import (
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// FuzzDeclaredSize: any annotation gives a size within (0, vmsize.MaxMilliCPU]
// or a reason, never a panic and never both.
func FuzzDeclaredSize(f *testing.F) {
	for _, s := range []string{"4", "250m", "0", "-1", "1e12", "8192", "8193", "0.5", "", "x", "1Ki", "9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, a string) {
		set := NewSet([]Pod{{UID: "u", Annotation: map[string]string{vmsize.AnnotationCPU: a}}})
		sz, ok, err := set.DeclaredSize("u")
		switch {
		case ok && err != nil:
			t.Fatalf("%q: a size and an error", a)
		case ok && (sz.MilliCPU <= 0 || sz.MilliCPU > vmsize.MaxMilliCPU):
			t.Fatalf("%q: size %dm accepted", a, sz.MilliCPU)
		case !ok && err == nil:
			t.Fatalf("%q: neither a size nor a reason", a)
		}
	})
}

func TestDeclaredSizeSources(t *testing.T) {
	set := NewSet([]Pod{
		{UID: "a", Annotation: map[string]string{vmsize.AnnotationCPU: "2"}},
		{UID: "b", Namespace: "n", VMSize: &Size{MilliCPU: 4000, Source: "neonvm"}, Annotation: map[string]string{vmsize.AnnotationCPU: "1"},
			Owners: []Owner{{APIVersion: "vm.neon.tech/v1", Kind: "VirtualMachine", Name: "vm-b"}}},
		{UID: "c", RequestMilliCPU: ptr(500)},
	})
	set.ApplyVMs([]VM{{Kind: "neonvm", Namespace: "n", Name: "vm-b", MilliCPU: 4000, PodLabel: vmsize.LabelNeonVM}}) // exists; labels no pod
	set.SetSize("d", Size{MilliCPU: 3000, Source: "kubevirt"})                                                       // no such pod: sizes are by UID anyway
	for uid, want := range map[string]int64{"a": 2000, "b": 4000, "d": 3000} {
		sz, ok, err := set.DeclaredSize(uid)
		if !ok || err != nil || sz.MilliCPU != want {
			t.Errorf("%s: %v %v %v, want %dm", uid, sz, ok, err, want)
		}
	}
	if _, ok, err := set.DeclaredSize("c"); ok || err != nil {
		t.Errorf("requests are not a declared size: %v %v", ok, err)
	}
}

func ptr(v int64) *int64 { return &v }

// A quantity with a huge exponent would hang apimachinery's parser: it is
// refused before it gets there, in an annotation and in a pods file.
func TestHugeExponentRefused(t *testing.T) {
	if _, err := vmsize.Quantity("9e2337203372"); err == nil {
		t.Error("9e2337203372 accepted")
	}
	for _, q := range []string{`"9e2337203372"`, `9e2337203372`} {
		file := `{"kind":"List","items":[{"kind":"Pod","metadata":{"uid":"u","name":"p","namespace":"n"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":` + q + `}}}]}}]}`
		if _, err := ParsePods(strings.NewReader(file)); err == nil || !strings.Contains(err.Error(), "exponent") {
			t.Errorf("pods file with cpu %s: %v", q, err)
		}
	}
}
