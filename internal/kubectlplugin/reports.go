package kubectlplugin

import (
	"encoding/json"
	"fmt"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/inspect"
)

// selection is which pods to show: those of one namespace, or all (-A).
// With one namespace, audit findings about no pod (a QoS tier, a host
// cgroup) are left out, as `cgwarden audit -n` leaves them out.
type selection struct {
	all       bool
	namespace string
}

func (s selection) match(ns *string) bool {
	return s.all || (ns != nil && *ns == s.namespace)
}

// finding is what the table shows of a finding; the JSON output passes
// the agent's finding through whole.
type finding struct {
	Rule     string         `json:"rule"`
	Severity audit.Severity `json:"severity"`
	Subject  audit.Subject  `json:"subject"`
	Evidence struct {
		Summary string `json:"summary"`
	} `json:"evidence"`
}

// auditDoc is a node's audit, findings kept as sent.
type auditDoc struct {
	Node     json.RawMessage   `json:"node"`
	Counts   audit.Counts      `json:"counts"`
	Findings []json.RawMessage `json:"findings"`
	Notes    []string          `json:"notes,omitempty"`
	// Sizes is where each declared size came from and whether it was
	// taken (audit.Sizes), its pods selected as the findings are.
	Sizes json.RawMessage `json:"sizes,omitempty"`
}

// selectAudit keeps the selected findings of a node's audit (counts
// recounted) and returns them decoded for the table, with the node header
// (nil when the agent sent none the plugin can read).
func selectAudit(body []byte, sel selection) ([]byte, []finding, *inspect.NodeJSON, error) {
	var doc auditDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, nil, nil, fmt.Errorf("the agent's audit: %w", err)
	}
	kept, rows := doc.Findings[:0], []finding{}
	doc.Counts = audit.Counts{}
	for _, raw := range doc.Findings {
		var f finding
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, nil, nil, fmt.Errorf("the agent's audit: a finding: %w", err)
		}
		if !sel.all && (f.Subject.PodUID == "" && f.Subject.PodName == "" || f.Subject.Namespace != sel.namespace) {
			continue
		}
		kept, rows = append(kept, raw), append(rows, f)
		switch f.Severity {
		case audit.Error:
			doc.Counts.Error++
		case audit.Warning:
			doc.Counts.Warning++
		case audit.Info:
			doc.Counts.Info++
		}
	}
	doc.Findings = kept
	sizes, err := selectSizes(doc.Sizes, sel)
	if err != nil {
		return nil, nil, nil, err
	}
	doc.Sizes = sizes
	out, err := json.Marshal(doc)
	return out, rows, nodeHeader(doc.Node), err
}

// selectSizes keeps the audit's sizes with the selected pods[] (by their
// subject's namespace), every other field as sent.
func selectSizes(raw json.RawMessage, sel selection) (json.RawMessage, error) {
	if len(raw) == 0 || sel.all {
		return raw, nil
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("the agent's audit: sizes: %w", err)
	}
	type sizedPod struct {
		Subject struct {
			Namespace string `json:"namespace"`
		} `json:"subject"`
	}
	kept, _, err := selectRaw(doc, "pods", sel, "the agent's audit: a sized pod", func(p *sizedPod) *string { return &p.Subject.Namespace })
	if err != nil {
		return nil, err
	}
	if err := setKey(doc, "pods", kept); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// nodeHeader reads the audit's node header for the table's node lines;
// nil when there is none or it cannot be read (the header passes through
// to -o json as sent either way: a header the plugin cannot read is not
// the node's failure).
func nodeHeader(raw json.RawMessage) *inspect.NodeJSON {
	var h inspect.NodeJSON
	if len(raw) == 0 || json.Unmarshal(raw, &h) != nil {
		return nil
	}
	return &h
}

// selectInspect keeps the selected pods (and sized pods) of a node's
// inventory, every other field as sent, and returns the pods decoded for
// the table.
func selectInspect(body []byte, sel selection) ([]byte, []inspect.PodJSON, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, nil, fmt.Errorf("the agent's inventory: %w", err)
	}
	pods, rows, err := selectRaw(doc, "pods", sel, "the agent's inventory: a pod", func(p *inspect.PodJSON) *string { return p.Namespace })
	if err != nil {
		return nil, nil, err
	}
	sized, _, err := selectRaw(doc, "sizedPods", sel, "the agent's inventory: a sized pod", func(s *inspect.SizedJSON) *string { return &s.Namespace })
	if err != nil {
		return nil, nil, err
	}
	if err := setKey(doc, "pods", pods); err != nil {
		return nil, nil, err
	}
	delete(doc, "sizedPods")
	if len(sized) > 0 {
		if err := setKey(doc, "sizedPods", sized); err != nil {
			return nil, nil, err
		}
	}
	out, err := json.Marshal(doc)
	return out, rows, err
}

// selectRaw keeps the elements of doc's array key (none when there is no
// key), as sent, whose namespace (ns of the element decoded as T) the
// selection matches, and returns them decoded too; what names an element
// in an error.
func selectRaw[T any](doc map[string]json.RawMessage, key string, sel selection, what string, ns func(*T) *string) ([]json.RawMessage, []T, error) {
	var raws []json.RawMessage
	if raw, ok := doc[key]; ok {
		if err := json.Unmarshal(raw, &raws); err != nil {
			return nil, nil, fmt.Errorf("the agent's inventory: %s: %w", key, err)
		}
	}
	kept, rows := []json.RawMessage{}, []T{}
	for _, raw := range raws {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", what, err)
		}
		if sel.match(ns(&v)) {
			kept, rows = append(kept, raw), append(rows, v)
		}
	}
	return kept, rows, nil
}

func setKey(doc map[string]json.RawMessage, key string, v any) error {
	b, err := json.Marshal(v)
	doc[key] = b
	return err
}
