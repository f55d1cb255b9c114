package serve

import (
	"github.com/cgwarden/cgwarden/internal/audit"
)

// CountFindings counts an audit's findings per rule and severity. Every
// known rule and severity is listed, with 0 when nothing was found, so
// that an alert can tell "no finding" from "not audited".
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
