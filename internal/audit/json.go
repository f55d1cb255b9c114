package audit

import (
	"github.com/cgwarden/cgwarden/internal/inspect"
	"github.com/cgwarden/cgwarden/internal/inventory"
)

// JSONReport is `cgwarden audit -o json` (and -o yaml); see
// docs/schemas/audit.schema.json. findings[] keeps the DESIGN.md
// contract (rule, severity, subject, evidence, message, remedy); node is
// the same header as inspect's, and counts has one entry per severity,
// zeros included, so a tool need not count. The node header also says the
// container runtime when the metadata knows the Node (Report.NodeInfo).
type JSONReport struct {
	Node     inspect.NodeJSON `json:"node"`
	Counts   Counts           `json:"counts"`
	Findings []Finding        `json:"findings"`
	Notes    []string         `json:"notes,omitempty"`
	Sizes    *Sizes           `json:"sizes,omitempty"`
}

// Counts are the findings per severity.
type Counts struct {
	Error   int `json:"error"`
	Warning int `json:"warning"`
	Info    int `json:"info"`
}

// JSON is the report of findings on n, for tools.
func JSON(n *inventory.Node, r *Report) JSONReport {
	j := JSONReport{Node: inspect.NodeOf(n), Findings: r.Findings, Notes: r.Notes, Sizes: r.Sizes}
	j.Node.ContainerRuntimeVersion = r.NodeInfo.ContainerRuntimeVersion
	if j.Findings == nil {
		j.Findings = []Finding{}
	}
	c := r.count()
	j.Counts = Counts{Error: c[Error], Warning: c[Warning], Info: c[Info]}
	return j
}
