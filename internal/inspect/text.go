package inspect

import (
	"fmt"
	"io"
	"regexp"
	"text/tabwriter"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/mounts"
)

// MisplacedMarker starts the row of a container whose cgroup is outside
// its pod.
const MisplacedMarker = "‼ MISPLACED"

// NoKubepods is said when no kubelet hierarchy exists on the node.
const NoKubepods = "no kubepods hierarchy found: this node runs no kubelet (or its cgroups are elsewhere)."

var longHex = regexp.MustCompile(`[0-9a-f]{64}`)

// short cuts 64-hex container IDs to 12 characters, as runtimes print them.
func short(s string) string {
	return longHex.ReplaceAllStringFunc(s, func(h string) string { return h[:12] + "…" })
}

type row struct {
	name, kind, who                         string
	weight, quota, guaranteed, used, memory string
	demand, fair                            string
}

// WriteText writes the human view: a header line, then the cgroup tree
// with columns. The kubelet's subtree is shown whole; other cgroups only
// at the first level and on the way to the kubelet's root and to
// containers or VM processes outside it. Misplaced containers appear under their pod, marked,
// and again where they really are.
func WriteText(w io.Writer, n *inventory.Node, hints []string) error {
	ver := string(n.Version)
	if n.Version == mounts.Hybrid {
		ver = "v1 (hybrid)"
	}
	kube := "kubelet root: none"
	if n.KubeRoot != nil {
		kube = fmt.Sprintf("kubelet root %s, %s driver", n.KubeRoot.Path, n.Driver)
	}
	fmt.Fprintf(w, "node: %s, cgroup %s, %s, %s, %s\n", plural(n.CPUs, "CPU"), ver, kube, plural(n.Count, "cgroup"), plural(len(n.Pods), "pod"))
	if len(n.Errors) > 0 {
		fmt.Fprintf(w, "warning: %s could not be read; their figures show as ?\n", plural(len(n.Errors), "cgroup file"))
	}
	if n.KubeRoot == nil {
		fmt.Fprintln(w, NoKubepods)
		for _, h := range hints {
			fmt.Fprintln(w, h)
		}
	}
	fmt.Fprintln(w)

	podOf := map[*inventory.Cgroup]*inventory.Pod{}
	type attached struct {
		pod *inventory.Pod
		ctr *inventory.Container
	}
	ctrOf := map[*inventory.Cgroup]attached{}
	for _, p := range n.Pods {
		if p.Cgroup != nil {
			podOf[p.Cgroup] = p
		}
		for _, ct := range p.Containers {
			ctrOf[ct.Cgroup] = attached{p, ct}
		}
	}
	// Host cgroups below the first level stay folded, except on the way
	// down to the kubelet's root (a --cgroup-root prefix such as kind's
	// /kubelet.slice) and to cgroups that hold containers or VM processes
	// outside it (a runtime's /system.slice/containerd.service/...): there
	// only the cgroups on those ways are shown.
	onWay := map[*inventory.Cgroup]bool{}
	mark := func(c *inventory.Cgroup) {
		for ; c != nil && !onWay[c]; c = c.Parent {
			onWay[c] = true
		}
	}
	mark(n.KubeRoot)
	for _, p := range n.Pods {
		for _, ct := range p.Containers {
			if ct.Misplaced {
				mark(ct.Cgroup)
			}
		}
	}
	for _, c := range n.Unattached {
		mark(c)
	}
	var rows []row
	var visit func(c *inventory.Cgroup, prefix string, last bool, depth int)
	visit = func(c *inventory.Cgroup, prefix string, last bool, depth int) {
		branch, childPrefix := "", prefix
		if depth > 0 {
			branch, childPrefix = prefix+"├─ ", prefix+"│  "
			if last {
				branch, childPrefix = prefix+"└─ ", prefix+"   "
			}
		}
		r := cgroupRow(c, branch+short(c.Name()))
		if p := podOf[c]; p != nil && p.Name != "" {
			r.who = p.Namespace + "/" + p.Name
		}
		// A container under its pod shows its name (blank when unknown,
		// as for sandbox containers kubectl does not list); one away from
		// its pod points at the pod, by name when known.
		if a, ok := ctrOf[c]; ok {
			r.who = a.ctr.Name
			if a.ctr.Misplaced {
				r.who = "→ " + podLabel(a.pod)
			}
			if a.ctr.Leftover {
				r.kind, r.who = "leftover", "empty; moved into "+podLabel(a.pod)
			}
		}
		rows = append(rows, r)
		kids := c.Children
		inKube := c.Identity.Kind != layout.Host || c == n.KubeRoot
		if !inKube && depth >= 1 {
			kids = nil
			for _, ch := range c.Children {
				if onWay[ch] {
					kids = append(kids, ch)
				}
			}
		}
		if c.Identity.IsContainerLike() || c.Identity.Kind == layout.Foreign {
			kids = nil // nested cgroups of a container are its own business
		}
		var extra []*inventory.Container
		if p := podOf[c]; p != nil {
			for _, ct := range p.Containers {
				if ct.Misplaced {
					extra = append(extra, ct)
				}
			}
		}
		for i, ch := range kids {
			visit(ch, childPrefix, i == len(kids)-1 && len(extra) == 0, depth+1)
		}
		for i, ct := range extra {
			b := childPrefix + "├─ "
			if i == len(extra)-1 {
				b = childPrefix + "└─ "
			}
			r := cgroupRow(ct.Cgroup, b+MisplacedMarker+" "+short(ct.ID)+" at "+short(ct.Cgroup.Path))
			r.kind, r.who = "container", ct.Name
			rows = append(rows, r)
		}
	}
	visit(n.Root, "", true, 0)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// With a demand-aware fair share (inspect --demand), two more columns:
	// what each cgroup wanted and what it should get under that demand.
	withFair := n.Root.FairCores != nil
	if withFair {
		fmt.Fprintln(tw, "CGROUP\tKIND\tPOD\tWEIGHT\tQUOTA\tGUARANTEED\tCPU USED\tDEMAND\tFAIR\tMEM WS\t")
	} else {
		fmt.Fprintln(tw, "CGROUP\tKIND\tPOD\tWEIGHT\tQUOTA\tGUARANTEED\tCPU USED\tMEM WS\t")
	}
	for _, r := range rows {
		if withFair {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.name, r.kind, r.who, r.weight, r.quota, r.guaranteed, r.used, r.demand, r.fair, r.memory)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.name, r.kind, r.who, r.weight, r.quota, r.guaranteed, r.used, r.memory)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(n.Unattached) > 0 {
		verb := "look"
		if len(n.Unattached) == 1 {
			verb = "looks"
		}
		fmt.Fprintf(w, "\n%s %s like containers or VM processes but name no known pod (give --pods to attach them):\n", plural(len(n.Unattached), "cgroup"), verb)
		for _, c := range n.Unattached {
			fmt.Fprintf(w, "  %s (%s)\n", short(c.Path), c.Identity.Shape)
		}
	}
	return nil
}

func cgroupRow(c *inventory.Cgroup, name string) row {
	id := c.Identity
	kind := string(id.Kind)
	switch id.Kind {
	case layout.QoSTier:
		kind = id.QoS
	case layout.Pod:
		kind = "pod/" + id.QoS
	case layout.Misplaced:
		kind = "misplaced"
	}
	r := row{name: name, kind: kind, who: "", weight: "?", quota: "?", used: "?", memory: "?"}
	if id.PodUID != "" && id.Kind != layout.Pod {
		r.who = "→ pod " + id.PodUID
	}
	if id.Kind == layout.Escaped {
		r.who = "→ pod " + id.PodName
	}
	if w := c.Stats.CPU.Weight; w != nil {
		r.weight = fmt.Sprint(*w)
	} else if c.Parent == nil && c.Path == "/" {
		r.weight = "-" // the root has no weight file: it competes with nothing
	}
	if q := QuotaCores(c.Stats.CPU); q != nil {
		r.quota = "-"
		if *q >= 0 {
			r.quota = fmt.Sprintf("%.2f", *q)
		}
	} else if c.Parent == nil && c.Path == "/" {
		r.quota = "-" // nor a quota file on v2
	}
	r.guaranteed = Cores(c.GuaranteedCores)
	if c.UsageCores != nil {
		r.used = fmt.Sprintf("%.3f", *c.UsageCores)
	}
	r.demand, r.fair = "?", "?"
	if c.DemandCores != nil {
		r.demand = Cores(*c.DemandCores)
	}
	if c.FairCores != nil {
		r.fair = Cores(*c.FairCores)
	}
	if ws := c.Stats.Memory.WorkingSetBytes; ws != nil {
		r.memory = Bytes(*ws)
	}
	return r
}

// plural writes "1 pod", "2 pods".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// podLabel names a pod for people: namespace/name when known, else its UID.
func podLabel(p *inventory.Pod) string {
	if p.Name != "" {
		return p.Namespace + "/" + p.Name
	}
	return "pod " + p.UID
}

// Cores prints a CPU figure with enough digits to tell 0.002 from 0.
func Cores(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 0.001:
		return fmt.Sprintf("%.1e", v)
	case v < 0.1:
		return fmt.Sprintf("%.4f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// Bytes prints a size in binary units.
func Bytes(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit && exp < 4; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTP"[exp])
}
