package audit

import (
	"fmt"
	"strings"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// Sizes is where every declared pod size on the node came from: what the
// weight fixes size BestEffort pods by, and what they refused to believe
// (docs/security.md, "Trusted sizes").
type Sizes struct {
	// AllocatableMilliCPU caps every size (0: unknown, and Uncapped says
	// why sizes are not capped).
	AllocatableMilliCPU int64  `json:"allocatableMilliCPU,omitempty"`
	Uncapped            string `json:"uncapped,omitempty"`
	// Annotations is where cgwarden.io/cpu is believed: "*", a
	// comma-separated list of namespaces, or "" for nowhere.
	Annotations string     `json:"annotations"`
	Pods        []SizedPod `json:"pods"`
}

// SizedPod is one pod's declared size and its fate.
type SizedPod struct {
	Subject Subject `json:"subject"`
	// Source is the size's kind: neonvm, kubevirt, annotation.
	Source string `json:"source"`
	// From is what stated it: vm-object, runner-vmspec, annotation.
	From string `json:"from"`
	// Status is taken, capped or ignored.
	Status string `json:"status"`
	Via    string `json:"via"`
	// DeclaredMilliCPU is the size as stated (absent when it is not a
	// quantity); MilliCPU the size taken (absent when ignored).
	DeclaredMilliCPU int64  `json:"declaredMilliCPU,omitempty"`
	MilliCPU         int64  `json:"milliCPU,omitempty"`
	Trusted          string `json:"trusted,omitempty"`
	Reason           string `json:"reason,omitempty"`
}

// sizesOf lists the origins of meta's declared sizes; nil when no pod
// declares one.
func sizesOf(meta *metadata.Set) *Sizes {
	origins := meta.Origins()
	if len(origins) == 0 {
		return nil
	}
	t := meta.Trust()
	s := &Sizes{AllocatableMilliCPU: t.AllocatableMilliCPU, Annotations: t.Annotations, Pods: []SizedPod{}}
	if t.AllocatableMilliCPU <= 0 {
		s.Uncapped = t.AllocatableUnknown
		if s.Uncapped == "" {
			s.Uncapped = "the node's allocatable CPU is unknown"
		}
	}
	for _, o := range origins {
		sp := SizedPod{Subject: Subject{Kind: "pod", PodUID: o.Pod.UID, PodName: o.Pod.Name, Namespace: o.Pod.Namespace},
			Source: o.Source, Via: o.Via, DeclaredMilliCPU: o.DeclaredMilliCPU, MilliCPU: o.MilliCPU, Trusted: o.Trusted}
		switch {
		case strings.HasPrefix(o.Via, "VM object"):
			sp.From = "vm-object"
		case strings.HasPrefix(o.Via, "the runner's -vmspec"):
			sp.From = "runner-vmspec"
		default:
			sp.From = "annotation"
		}
		switch {
		case o.Ignored != "":
			sp.Status, sp.Reason = "ignored", o.Ignored
		case o.Capped != "":
			sp.Status, sp.Reason = "capped", o.Capped
		default:
			sp.Status = "taken"
		}
		s.Pods = append(s.Pods, sp)
	}
	return s
}

// writeSizes prints the origins for people, one line a pod.
func writeSizes(b *strings.Builder, s *Sizes) {
	if s == nil {
		return
	}
	b.WriteString("\nDeclared sizes:\n")
	for _, p := range s.Pods {
		line := p.Subject.String() + ": "
		switch p.Status {
		case "ignored":
			line += p.Via + " ignored (" + p.Reason + "); the kubelet's weight stays"
		default:
			line += milliCPU(p.MilliCPU) + " from " + p.Via
			if p.Trusted != "" {
				line += " (trusted: " + p.Trusted + ")"
			}
			if p.Status == "capped" {
				line += ", " + p.Reason
			}
		}
		wrap(b, "  - ", "    ", line)
	}
	if s.Uncapped != "" {
		wrap(b, "  ", "  ", "Sizes are not capped at the node's allocatable CPU: "+s.Uncapped+".")
	}
}

// milliCPU writes a size as people read it: "250m", "4 CPUs".
func milliCPU(m int64) string {
	switch {
	case m%1000 != 0:
		return fmt.Sprintf("%dm CPU", m)
	case m == 1000:
		return "1 CPU"
	}
	return fmt.Sprintf("%d CPUs", m/1000)
}
