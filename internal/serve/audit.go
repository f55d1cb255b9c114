package serve

import (
	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
)

// AuditFindings runs the audit on a scan and counts its findings per rule
// and severity. Every rule and severity is listed, with 0 when nothing was
// found, so that an alert can tell "no finding" from "not audited".
func AuditFindings(n *inventory.Node, meta *metadata.Set) []FindingCount {
	return CountFindings(audit.Run(&audit.Input{Node: n, Meta: meta}))
}

// CountFindings counts an audit's findings per rule and severity (every
// known rule and severity present, at 0 when none).
func CountFindings(r *audit.Report) []FindingCount {
	severities := []audit.Severity{audit.Error, audit.Warning, audit.Info}
	out := make([]FindingCount, 0, len(audit.Rules)*len(severities))
	index := map[[2]string]int{}
	for _, rule := range audit.Rules {
		for _, sev := range severities {
			index[[2]string{rule.ID, string(sev)}] = len(out)
			out = append(out, FindingCount{Rule: rule.ID, Severity: string(sev)})
		}
	}
	for _, f := range r.Findings {
		key := [2]string{f.Rule, string(f.Severity)}
		i, ok := index[key]
		if !ok {
			index[key] = len(out)
			out = append(out, FindingCount{Rule: f.Rule, Severity: string(f.Severity)})
			i = len(out) - 1
		}
		out[i].Count++
	}
	return out
}
