package inspect

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"

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

// ShortIDs cuts the 64-hex container IDs in s to 12 characters, as
// runtimes print them.
func ShortIDs(s string) string {
	return longHex.ReplaceAllStringFunc(s, func(h string) string { return h[:12] + "…" })
}

type row struct {
	name                                    cell
	kind, who                               string
	weight, quota, guaranteed, used, memory string
	demand, fair, limit, throttled          string
	capped                                  bool
}

// TextOptions shape the human view.
type TextOptions struct {
	// Width is the terminal's width in columns: the CGROUP column's names
	// are shortened in the middle to fit. 0 is no limit (a pipe).
	Width int
	// Wide shows names and container IDs whole, and the memory limit and
	// throttled periods.
	Wide bool
	// NoHeaders writes the table's rows only: no node line, column
	// headers, footnotes or lists after the table.
	NoHeaders bool
	// Hints are said when the node has no kubelet hierarchy.
	Hints []string
	// Keep selects the pods shown (with their containers); nil shows all.
	Keep func(*inventory.Pod) bool
	// Order sorts sibling cgroups; nil keeps the scan's order (by name).
	Order func(a, b *inventory.Cgroup) int
}

// NoKnownPod is the POD column of a container-shaped cgroup that names
// no known pod (it appears once, in the tree; a note after it says so).
const NoKnownPod = "→ no known pod"

// CappedMark follows a GUARANTEED figure that a CPU quota caps.
const CappedMark = "*"

// WriteText writes the human view: a header line, then the cgroup tree
// with columns. The kubelet's subtree is shown whole; other cgroups only
// at the first level and on the way to the kubelet's root and to VM
// processes outside it. A misplaced container appears once, under its pod,
// marked, with the path where it really is.
func WriteText(w io.Writer, n *inventory.Node, opt TextOptions) error {
	if !opt.NoHeaders {
		writeNodeLine(w, n, opt.Hints)
	}
	keep := func(p *inventory.Pod) bool { return opt.Keep == nil || opt.Keep(p) }
	id := ShortIDs
	if opt.Wide {
		id = func(s string) string { return s }
	}
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
	// /kubelet.slice) and to cgroups that hold VM processes or unknown
	// containers outside it: there only the cgroups on those ways are
	// shown. A misplaced container is shown under its pod only.
	onWay := map[*inventory.Cgroup]bool{}
	mark := func(c *inventory.Cgroup) {
		for ; c != nil && !onWay[c]; c = c.Parent {
			onWay[c] = true
		}
	}
	mark(n.KubeRoot)
	unattached := map[*inventory.Cgroup]bool{}
	for _, c := range n.Unattached {
		mark(c)
		unattached[c] = true
	}
	hidden := func(c *inventory.Cgroup) bool {
		if a, ok := ctrOf[c]; ok && (a.ctr.Misplaced || !keep(a.pod)) {
			return true
		}
		p := podOf[c]
		return p != nil && !keep(p)
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
		r := cgroupRow(c, cell{tree: branch, name: id(c.Name())})
		if p := podOf[c]; p != nil && p.Name != "" {
			r.who = p.Namespace + "/" + p.Name
		}
		// A container under its pod shows its name (blank when unknown);
		// a sandbox (pause, Kata's VM, conmon) is marked as such.
		if a, ok := ctrOf[c]; ok {
			r.who = a.ctr.Name
			if IsSandbox(a.pod, a.ctr) {
				r.kind = "sandbox"
			}
			if a.ctr.Leftover {
				r.kind, r.who = "leftover", "empty; moved into "+podLabel(a.pod)
			}
		}
		if unattached[c] && r.who == "" {
			r.who = NoKnownPod
		}
		rows = append(rows, r)
		var kids []*inventory.Cgroup
		inKube := c.Identity.Kind != layout.Host || c == n.KubeRoot
		for _, ch := range c.Children {
			if hidden(ch) || (!inKube && depth >= 1 && !onWay[ch]) {
				continue
			}
			kids = append(kids, ch)
		}
		if c.Identity.IsContainerLike() || c.Identity.Kind == layout.Foreign {
			kids = nil // nested cgroups of a container are its own business
		}
		if opt.Order != nil {
			slices.SortStableFunc(kids, opt.Order)
		}
		var extra []*inventory.Container
		p := podOf[c]
		if p != nil {
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
			// The short ID says which container when the path is cut;
			// -o wide shows the path whole, and the ID in it.
			fixed := MisplacedMarker + " " + ShortIDs(ct.ID) + " at "
			if opt.Wide {
				fixed = MisplacedMarker + " at "
			}
			r := cgroupRow(ct.Cgroup, cell{tree: b, fixed: fixed, name: id(ct.Cgroup.Path)})
			r.kind, r.who = "container", ct.Name
			if IsSandbox(p, ct) {
				r.kind = "sandbox"
			}
			rows = append(rows, r)
		}
	}
	visit(n.Root, "", true, 0)
	if err := writeTree(w, n, rows, opt); err != nil {
		return err
	}
	if opt.NoHeaders {
		return nil
	}
	if len(n.Unattached) > 0 {
		verb := "look"
		if len(n.Unattached) == 1 {
			verb = "looks"
		}
		fmt.Fprintf(w, "\n%s marked %q above %s like containers or VM processes but name no known pod (give pod metadata to attach them).\n", plural(len(n.Unattached), "cgroup"), NoKnownPod, verb)
	}
	for _, c := range n.Foreign {
		fmt.Fprintf(w, "\nforeign: %s names pod %s and container %s, which the pod's metadata does not list: not the pod's, never moved into it.\n",
			c.Path, c.Identity.PodUID, ShortIDs(c.Identity.ContainerID))
	}
	return nil
}

func writeNodeLine(w io.Writer, n *inventory.Node, hints []string) {
	ver := string(n.Version)
	if n.Version == mounts.Hybrid {
		ver = "v1 (hybrid)"
	}
	kube := "kubelet root: none"
	if n.KubeRoot != nil {
		kube = fmt.Sprintf("kubelet root %s, %s driver", n.KubeRoot.Path, n.Driver)
	}
	fmt.Fprintf(w, "node: %s, cgroup %s, %s, %s, %s\n", plural(n.CPUs, "CPU"), ver, kube, plural(n.Cgroups, "cgroup"), plural(len(n.Pods), "pod"))
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
}

// WeightHeader names the weight column by the file it shows: cpu.shares
// on cgroup v1 (and hybrid nodes, whose cpu controller is on v1),
// cpu.weight on v2.
func WeightHeader(v mounts.Version) string {
	if v == mounts.V2 {
		return "WEIGHT"
	}
	return "SHARES"
}

// writeTree writes the rows as a table, and the footnote of capped
// guarantees.
func writeTree(w io.Writer, n *inventory.Node, rows []row, opt TextOptions) error {
	// With a demand-aware fair share (inspect --demand), two more columns:
	// what each cgroup wanted and what it should get under that demand.
	withFair := n.Root.FairCores != nil
	cores := func(h string) column { return column{head: h, unit: "cores", right: true} }
	cols := []column{{head: "CGROUP"}, {head: "KIND"}, {head: "POD"}, {head: WeightHeader(n.Version), right: true},
		cores("QUOTA"), cores("GUARANTEED"), cores("CPU USED")}
	if withFair {
		cols = append(cols, cores("DEMAND"), cores("FAIR"))
	}
	cols = append(cols, column{head: "MEM WS", unit: "MiB", right: true})
	if opt.Wide {
		cols = append(cols, column{head: "MEM LIMIT", unit: "MiB", right: true}, column{head: "THROTTLED", unit: "periods", right: true})
	}
	anyCapped := false
	for _, r := range rows {
		anyCapped = anyCapped || r.capped
	}
	first := make([]cell, 0, len(rows))
	cells := make([][]string, 0, len(rows))
	for _, r := range rows {
		g := r.guaranteed
		if anyCapped {
			// Every figure keeps a place for the mark, so the decimals
			// stay aligned.
			if r.capped {
				g += CappedMark
			} else {
				g += " "
			}
		}
		c := []string{r.kind, r.who, r.weight, r.quota, g, r.used}
		if withFair {
			c = append(c, r.demand, r.fair)
		}
		c = append(c, r.memory)
		if opt.Wide {
			c = append(c, r.limit, r.throttled)
		}
		first = append(first, r.name)
		cells = append(cells, c)
	}
	width := opt.Width
	if opt.Wide {
		width = 0
	}
	if err := writeTable(w, cols, first, cells, !opt.NoHeaders, width); err != nil {
		return err
	}
	if anyCapped && !opt.NoHeaders {
		_, err := fmt.Fprintf(w, "\n%s capped: the CPU quota (the cgroup's own or a parent's) allows fewer cores than its weight guarantees under contention; GUARANTEED shows the quota (-o json has both: cpu.guaranteedCores, cpu.quotaCappedCores).\n", CappedMark)
		return err
	}
	return nil
}

func cgroupRow(c *inventory.Cgroup, name cell) row {
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
	r := row{name: name, kind: kind}
	if id.PodUID != "" && id.Kind != layout.Pod {
		r.who = "→ pod " + id.PodUID
	}
	if id.Kind == layout.Escaped {
		r.who = "→ pod " + id.PodName
	}
	// The root has no weight file (it competes with nothing), nor a quota
	// file on v2: its missing figures are "-", not unknown.
	root := c.Parent == nil && c.Path == "/"
	cpu, m := c.Stats.CPU, c.Stats.Memory
	r.weight = figure(cpu.Weight, root, decimal)
	r.quota = figure(QuotaCores(cpu), root, func(q float64) string {
		if q < 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", q)
	})
	r.guaranteed = FixedCores(c.GuaranteedCores)
	if lim := QuotaCap(c); lim != nil && *lim < c.GuaranteedCores {
		r.guaranteed, r.capped = FixedCores(*lim), true
	}
	r.used = figure(c.UsageCores, false, func(u float64) string { return fmt.Sprintf("%.3f", u) })
	r.demand, r.fair = figure(c.DemandCores, false, FixedCores), figure(c.FairCores, false, FixedCores)
	r.memory = figure(m.WorkingSetBytes, false, MiB)
	r.limit = figure(m.LimitBytes, root, func(l int64) string {
		if l < 0 {
			return "-"
		}
		return MiB(uint64(l))
	})
	r.throttled = figure(cpu.Throttled, root, decimal)
	return r
}

// figure writes a figure of the table: "?" when unknown, except where
// the file is missing by design ("-").
func figure[T any](v *T, dash bool, format func(T) string) string {
	switch {
	case v != nil:
		return format(*v)
	case dash:
		return "-"
	}
	return "?"
}

// IsSandbox says whether a pod's container cgroup is runtime overhead
// rather than one of the pod's containers. The inventory says so for a
// Kata sandbox or conmon. Otherwise, when the pod's metadata is known (it
// has a name) and names every container cgroup of the pod but one, that
// one is the pod's sandbox (the pause container), which kubectl and the
// CRI container list leave out. Two or more unnamed cgroups (metadata
// older than a container's restart) mark none: which is the sandbox is
// then a guess.
func IsSandbox(p *inventory.Pod, c *inventory.Container) bool {
	if c.Sandbox {
		return true
	}
	if p == nil || p.Name == "" || c.Name != "" || c.Leftover {
		return false
	}
	unnamed := 0
	for _, o := range p.Containers {
		if o.Name == "" && !o.Sandbox && !o.Leftover {
			unnamed++
		}
	}
	return unnamed == 1
}

// QuotaCap is the fewest cores the CPU quotas of c and its parents allow;
// nil when none of them has a quota (or none could be read).
func QuotaCap(c *inventory.Cgroup) *float64 {
	var lim *float64
	for ; c != nil; c = c.Parent {
		if q := QuotaCores(c.Stats.CPU); q != nil && *q >= 0 && (lim == nil || *q < *lim) {
			v := *q
			lim = &v
		}
	}
	return lim
}

// FixedCores writes cores with four decimals, one format for a whole
// column: enough for a starved pod's sliver (0.0005) beside whole cores.
func FixedCores(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

// decimal writes a count.
func decimal(n uint64) string { return strconv.FormatUint(n, 10) }

// MiB writes bytes in MiB with one decimal.
func MiB(b uint64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) }

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
