package kubectlplugin

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"k8s.io/utils/ptr"

	"github.com/cgwarden/cgwarden/internal/inspect"
)

// The cluster-wide tables: one row per finding or pod, NODE first, in the
// order of the nodes and, within a node, in the agent's order (the audit
// sorts findings by severity; the inventory keeps the node's pod order).

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// writeAuditTable writes NODE SEVERITY RULE SUBJECT EVIDENCE, then,
// after a blank line, one line per node that answered: what its agent
// says of it (nodeLine).
func writeAuditTable(w io.Writer, nodes []nodeAudit) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NODE\tSEVERITY\tRULE\tSUBJECT\tEVIDENCE")
	for _, n := range nodes {
		for _, f := range n.findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.name, f.Severity, f.Rule, f.Subject.String(), oneLine(f.Evidence.Summary))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(nodes) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\n")
	for _, n := range nodes {
		b.WriteString(nodeLine(n) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// nodeLine is what a node's audit header says of the node: its cgroup
// version, the kubelet's cgroup driver and the container runtime, e.g.
// "node worker-1: cgroup v2, systemd driver, containerd://2.4.2". What the
// agent did not say is unknown, never guessed: the runtime comes from the
// Node object, which an agent reads only with the API server (and agents
// before it did not send it); a report without a cgroup version is not
// an agent's this plugin knows.
func nodeLine(n nodeAudit) string {
	h := n.node
	if h == nil || h.CgroupVersion == "" {
		return fmt.Sprintf("node %s: cgroup version unknown (agent too old)", n.name)
	}
	version := h.CgroupVersion
	if h.Hybrid {
		version += " (hybrid)"
	}
	driver := "no kubepods hierarchy"
	switch {
	case h.Driver != nil:
		driver = *h.Driver + " driver"
	case h.KubeRoot != nil:
		driver = "driver unknown"
	}
	runtime := h.ContainerRuntimeVersion
	if runtime == "" {
		runtime = "runtime unknown"
	}
	return oneLine(fmt.Sprintf("node %s: cgroup %s, %s, %s", n.name, version, driver, runtime))
}

// writeInspectTable writes NODE NAMESPACE POD QOS WEIGHT GUARANTEED USED
// MEMORY CONTAINERS MISPLACED; POD is the pod's name, else its UID (no pod
// metadata); "-" is unknown (no pod metadata, a file that could not be
// read), never 0.
func writeInspectTable(w io.Writer, nodes []nodeInspect) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NODE\tNAMESPACE\tPOD\tQOS\tWEIGHT\tGUARANTEED\tUSED\tMEMORY\tCONTAINERS\tMISPLACED")
	for _, n := range nodes {
		for _, p := range n.pods {
			var weight, memory *uint64
			var guaranteed, used *float64
			if p.CPU != nil {
				weight, guaranteed, used = p.CPU.Weight, &p.CPU.GuaranteedCores, p.CPU.UsageCores
			}
			if p.Memory != nil {
				memory = p.Memory.WorkingSetBytes
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", n.name, cmp.Or(ptr.Deref(p.Namespace, ""), "-"),
				cmp.Or(ptr.Deref(p.Name, ""), p.UID), p.QoS, number(weight, "%d"), number(guaranteed, "%.3f"), number(used, "%.3f"),
				mebibytes(memory), containers(p), misplaced(p))
		}
	}
	return tw.Flush()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// containers counts the pod's declared containers (not its sandbox).
func containers(p inspect.PodJSON) int {
	n := 0
	for _, c := range p.Containers {
		if !c.Sandbox {
			n++
		}
	}
	return n
}

func misplaced(p inspect.PodJSON) int {
	n := 0
	for _, c := range p.Containers {
		if c.Misplaced {
			n++
		}
	}
	return n
}

// writePromAuditTable writes NODE SEVERITY RULE FINDINGS: the findings of
// each node's audit counted by rule, as Prometheus last scraped them.
func writePromAuditTable(w io.Writer, nodes []PromNode) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NODE\tSEVERITY\tRULE\tFINDINGS")
	for _, n := range nodes {
		for _, f := range n.Findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", n.Name, f.Severity, f.Rule, f.Count)
		}
	}
	return tw.Flush()
}

// writePromInspectTable writes the inspect table without QOS (no series
// carries it): NODE NAMESPACE POD WEIGHT GUARANTEED USED MEMORY
// CONTAINERS MISPLACED, in the same units; "-" is a series Prometheus
// does not have.
func writePromInspectTable(w io.Writer, nodes []PromNode) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NODE\tNAMESPACE\tPOD\tWEIGHT\tGUARANTEED\tUSED\tMEMORY\tCONTAINERS\tMISPLACED")
	for _, n := range nodes {
		for _, p := range n.Pods {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, cmp.Or(p.Namespace, "-"), cmp.Or(p.Pod, p.UID),
				number(p.Weight, "%.0f"), number(p.GuaranteedCores, "%.3f"), number(p.UsageCores, "%.3f"),
				mebibytes(p.WorkingSetBytes), number(p.Containers, "%d"), number(p.Misplaced, "%d"))
		}
	}
	return tw.Flush()
}

// number formats *v with format, "-" when it is unknown (or Prometheus
// has no series).
func number[T any](v *T, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

// mebibytes is *v bytes in MiB, "-" when unknown.
func mebibytes[T uint64 | float64](v *T) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fMi", float64(*v)/(1<<20))
}
