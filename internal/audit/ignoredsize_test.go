package audit

import (
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/vmsize"
)

// TestIgnoredSizeFinding: a pod on the node whose declared size is not
// believed (an annotation in a namespace nothing trusts) is a warning
// naming the size and the reason; a believed size, and a refused size of
// a pod that is not on the node (a pods file lists the whole cluster),
// are not findings.
func TestIgnoredSizeFinding(t *testing.T) {
	meta := metadata.NewSet([]metadata.Pod{
		{UID: uidA, Name: "vm-a", Namespace: "tenant", QoS: "besteffort", Annotation: map[string]string{vmsize.AnnotationCPU: "4"}},
		{UID: uidB, Name: "vm-b", Namespace: "trusted", QoS: "besteffort", Annotation: map[string]string{vmsize.AnnotationCPU: "2"}},
		{UID: uidC, Name: "vm-c", Namespace: "tenant", QoS: "besteffort", Annotation: map[string]string{vmsize.AnnotationCPU: "8"}},
	})
	meta.SetTrust(metadata.Trust{Annotations: "trusted", TrustedBy: "--trust-size-annotations names the namespace",
		Untrusted: "no size policy is installed"})
	be := "/kubepods.slice/kubepods-besteffort.slice"
	n := v2Node(t, meta,
		cg{path: "/kubepods.slice", weight: 100},
		cg{path: be, weight: 1},
		cg{path: be + "/kubepods-besteffort-pod" + under(uidA) + ".slice", weight: 1},
		cg{path: be + "/kubepods-besteffort-pod" + under(uidB) + ".slice", weight: 1},
	)
	r := Run(&Input{Node: n, Meta: meta})
	var got []Finding
	for _, f := range r.Findings {
		if f.Rule == rules.IgnoredSize {
			got = append(got, f)
		}
	}
	if len(got) != 1 || got[0].Subject.PodUID != uidA {
		t.Fatalf("ignored-size findings %+v, want one for %s", got, uidA)
	}
	f := got[0]
	if f.Severity != Warning || !strings.Contains(f.Evidence.Summary, `annotation cgwarden.io/cpu="4" states 4 CPUs, not taken: not trusted in namespace tenant: no size policy is installed`) {
		t.Errorf("finding %s: %q", f.Severity, f.Evidence.Summary)
	}
	if !strings.Contains(f.Remedy, "size policy") {
		t.Errorf("remedy %q does not name the size policy", f.Remedy)
	}
}

// TestSizesCappedAtTheNamespaceBound: a size above its namespace's
// --max-size bound is listed capped, with the bound as its reason (not an
// ignored-size finding: the pod keeps a size), and the section names the
// bounds.
func TestSizesCappedAtTheNamespaceBound(t *testing.T) {
	bounds, err := vmsize.ParseMaxSizes("tenant=2")
	if err != nil {
		t.Fatal(err)
	}
	meta := metadata.NewSet([]metadata.Pod{
		{UID: uidA, Name: "vm-a", Namespace: "tenant", QoS: "besteffort", Annotation: map[string]string{vmsize.AnnotationCPU: "8"}},
		{UID: uidB, Name: "vm-b", Namespace: "other", QoS: "besteffort", Annotation: map[string]string{vmsize.AnnotationCPU: "8"}},
	})
	meta.SetTrust(metadata.Trust{Annotations: metadata.AllNamespaces, TrustedBy: "the size policy is installed", MaxSizes: bounds})
	s := sizesOf(meta)
	if s == nil || s.MaxSizes != "tenant=2" || len(s.Pods) != 2 {
		t.Fatalf("sizes %+v, want both pods and the bounds", s)
	}
	for _, p := range s.Pods {
		switch p.Subject.PodUID {
		case uidA:
			if p.Status != "capped" || p.MilliCPU != 2000 || p.Reason != "capped at namespace tenant's --max-size bound tenant=2 (2000m, declared 8000m)" {
				t.Errorf("the tenant's pod: %+v", p)
			}
		case uidB:
			if p.Status != "taken" || p.MilliCPU != 8000 {
				t.Errorf("the other namespace's pod: %+v", p)
			}
		}
	}
	var b strings.Builder
	writeSizes(&b, s)
	if !strings.Contains(b.String(), "--max-size tenant=2") {
		t.Errorf("the text does not name the bounds:\n%s", b.String())
	}
}
