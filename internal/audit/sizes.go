package audit

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// Sizes is where every declared pod size on the node came from: what the
// weight fixes size BestEffort pods by, and what they refused to believe
// (docs/security.md, "Trusted sizes").
type Sizes struct {
	// AllocatableMilliCPU caps every size (0: unknown, and Uncapped says
	// why sizes are not capped).
	AllocatableMilliCPU int64  `json:"allocatableMilliCPU,omitempty"`
	Uncapped            string `json:"uncapped,omitempty"`
	// MaxSizes is --max-size, each namespace's bound on its pods' sizes
	// ("*=8,tenant=2"; absent when none): a size above it is capped.
	MaxSizes string `json:"maxSizes,omitempty"`
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
	s := &Sizes{AllocatableMilliCPU: t.AllocatableMilliCPU, MaxSizes: t.MaxSizes.String(), Annotations: t.Annotations, Pods: []SizedPod{}}
	if t.AllocatableMilliCPU <= 0 {
		s.Uncapped = cmp.Or(t.AllocatableUnknown, "the node's allocatable CPU is unknown")
	}
	for _, o := range origins {
		sp := SizedPod{Subject: Subject{Kind: "pod", PodUID: o.Pod.UID, PodName: o.Pod.Name, Namespace: o.Pod.Namespace},
			Source: o.Source, Via: o.Via, DeclaredMilliCPU: o.DeclaredMilliCPU, MilliCPU: o.MilliCPU, Trusted: o.Trusted}
		sp.From = sizeFrom(o.Origin)
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

// sizeFrom names what stated a size: vm-object, runner-vmspec or
// annotation.
func sizeFrom(o metadata.Origin) string {
	switch {
	case strings.HasPrefix(o.Via, "VM object"):
		return "vm-object"
	case strings.HasPrefix(o.Via, "the runner's -vmspec"):
		return "runner-vmspec"
	}
	return "annotation"
}

// checkIgnoredSizes reports each pod of the node whose declared size is
// ignored (not believed, or not a size at all), with the size and the
// reason. The Declared sizes section lists it too; the finding makes it
// count (--fail-on, cgwarden_audit_findings) and says what to do.
func checkIgnoredSizes(in *Input, r *Report) {
	if in.Meta == nil {
		return
	}
	onNode := map[string]*inventory.Pod{}
	for _, p := range in.Node.Pods {
		onNode[p.UID] = p
	}
	for _, o := range in.Meta.Origins() {
		p, ok := onNode[o.Pod.UID]
		if o.Ignored == "" || !ok {
			continue
		}
		from := sizeFrom(o.Origin)
		declared := "a size"
		if o.DeclaredMilliCPU > 0 {
			declared = milliCPU(o.DeclaredMilliCPU)
		}
		ev := Evidence{Summary: fmt.Sprintf("%s states %s, not taken: %s", o.Via, declared, o.Ignored)}
		ev.Add("source", o.Source).Add("from", from).Add("declaredMilliCPU", o.DeclaredMilliCPU).Add("reason", o.Ignored)
		remedy := "A VM's size counts for the one pod its VM object's status names (NeonVM status.podName, KubeVirt status.activePods); " +
			"a pod's own owner references, labels and arguments never do. A pods file (--pods) is the operator's own input: every command believes it."
		if from == "annotation" {
			remedy = "If the annotation is meant: install the size policy (deploy/kustomize/size-policy, chart sizePolicy.enabled=true), " +
				"which lets only the sizer set cgwarden.io/cpu, or name the namespace in --trust-size-annotations if everyone who may write its pods is trusted. " +
				"Otherwise remove it."
		}
		r.add(Finding{Rule: rules.IgnoredSize, Severity: Warning, Subject: podSubject(p), Evidence: ev,
			Message: "The pod's declared size buys no CPU weight: it keeps the kubelet's weight (a BestEffort pod: the minimum), " +
				"and the weight fixes do not count it in its tier. A weight an earlier fix set from this size is lowered by a holder that no longer believes it.",
			Remedy: remedy})
	}
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
	if s.MaxSizes != "" {
		wrap(b, "  ", "  ", "Sizes are bounded per namespace: --max-size "+s.MaxSizes+".")
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
