package kubectlplugin

import (
	"encoding/json"
	"io"
)

// render selects each node's pods and gathers the nodes into one report;
// failed counts the nodes that could not be read.
func (o *Options) render(results []Result, sel selection, k kind) (doc *ClusterReport, failed int) {
	doc = &ClusterReport{Kind: k.name, Nodes: []NodeReport{}}
	for _, r := range results {
		n := NodeReport{Name: r.Node, AgentPod: r.Namespace + "/" + r.Pod}
		err := r.Err
		if err == nil {
			err = doc.add(&n, r.Body, sel, k)
		}
		if err != nil {
			n.Error = err.Error()
			failed++
		}
		doc.Nodes = append(doc.Nodes, n)
	}
	return doc, failed
}

// add selects the pods of one node's report and keeps it.
func (doc *ClusterReport) add(n *NodeReport, body []byte, sel selection, k kind) error {
	if k == auditKind {
		b, rows, node, err := selectAudit(body, sel)
		if err != nil {
			return err
		}
		n.Report = b
		doc.audits = append(doc.audits, nodeAudit{name: n.Name, findings: rows, node: node})
		return nil
	}
	b, rows, err := selectInspect(body, sel)
	if err != nil {
		return err
	}
	n.Report = b
	doc.inspects = append(doc.inspects, nodeInspect{name: n.Name, pods: rows})
	return nil
}

// write writes the report as a table or as JSON.
func (o *Options) write(w io.Writer, doc *ClusterReport, k kind) error {
	if o.Output == "json" {
		return writeJSON(w, doc)
	}
	if k == auditKind {
		return writeAuditTable(w, doc.audits)
	}
	return writeInspectTable(w, doc.inspects)
}

// writeJSON writes v indented, as every -o json document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
