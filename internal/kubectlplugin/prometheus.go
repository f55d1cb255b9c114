package kubectlplugin

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The fleet from Prometheus (--prometheus, --prometheus-service): one
// instant query of the series the agents export (docs/metrics.md), as
// Prometheus scraped them, in place of a port-forward per node. It shows
// what a scrape carries: the audit's findings counted by node, rule and
// severity (cgwarden_audit_findings: the series have no subject), and each
// pod's weight, guaranteed and used CPU, working set and containers. A
// node's full audit, finding by finding, stays the port-forward
// (`kubectl cgwarden audit --node NAME`).

// DefaultPrometheusJob is the job the agent is scraped as: the job the
// alert CgwardenAgentDown reads (deploy/prometheus/cgwarden.rules.yaml).
const DefaultPrometheusJob = "cgwarden"

// instantQuerier is what the plugin asks of Prometheus's API.
type instantQuerier interface {
	Query(ctx context.Context, query string, ts time.Time, opts ...promv1.Option) (model.Value, promv1.Warnings, error)
}

var _ instantQuerier = promv1.API(nil)

// marker is the label the query adds to the series it computes, which
// `or` would otherwise drop (they match other series on every label but
// the name).
const marker = "cgwarden_plugin"

// Series the inspect query reads, one per pod each.
const (
	promWeight     = "cgwarden_pod_cpu_weight"
	promGuaranteed = "cgwarden_pod_cpu_guaranteed_cores"
	promUsed       = "cgwarden_pod_cpu_usage_cores"
	promMemory     = "cgwarden_pod_memory_working_set_bytes"
	promPodOutside = "cgwarden_pod_misplaced"
	promScan       = "cgwarden_last_scan_timestamp_seconds"
	promFindings   = "cgwarden_audit_findings"
)

// promMatchers is the label matchers every series of the query carries:
// the agent's job, and the node with --node.
func (o *Options) promMatchers() string {
	m := "job=" + strconv.Quote(o.PrometheusJob)
	if o.Node != "" {
		m += ",node=" + strconv.Quote(o.Node)
	}
	return m
}

// auditQuery is the audit's one query: the findings counts above 0, each
// node's scan time, and whether Prometheus could scrape its agent.
func (o *Options) auditQuery() string {
	m := o.promMatchers()
	return fmt.Sprintf(`%s{%s} > 0 or %s{%s} or label_replace(up{%s}, %q, "up", "", "")`, promFindings, m, promScan, m, m, marker)
}

// inspectQuery is the inventory's one query: each pod's figures (of the
// namespace selected), its containers counted and its misplaced ones
// summed by Prometheus (one series per pod, not per container), each
// node's scan time, and up.
func (o *Options) inspectQuery(sel selection) string {
	m := o.promMatchers()
	pm := m
	if !sel.all {
		pm += ",namespace=" + strconv.Quote(sel.namespace)
	}
	by := "node, instance, namespace, pod, uid"
	pods := strings.Join([]string{promWeight, promGuaranteed, promUsed, promMemory, promPodOutside}, "|")
	return fmt.Sprintf(`{__name__=~%q,%s}`, pods, pm) +
		fmt.Sprintf(` or label_replace(count by (%s) (cgwarden_container_misplaced{%s}), %q, "containers", "", "")`, by, pm, marker) +
		fmt.Sprintf(` or label_replace(sum by (%s) (cgwarden_container_misplaced{%s}), %q, "misplaced", "", "")`, by, pm, marker) +
		fmt.Sprintf(` or %s{%s} or label_replace(up{%s}, %q, "up", "", "")`, promScan, m, m, marker)
}

// PromReport is -o json with --prometheus: what one query of Prometheus
// says of every node its agent is scraped from.
type PromReport struct {
	Kind       string `json:"kind"`
	Source     string `json:"source"` // "prometheus"
	Prometheus string `json:"prometheus"`
	// Time is the query's evaluation time; each node's ScanTime says how
	// old its figures are.
	Time  time.Time  `json:"time"`
	Query string     `json:"query"`
	Nodes []PromNode `json:"nodes"`
}

// PromNode is one node of PromReport: its agent's last scan as
// Prometheus last scraped it, or why there is none.
type PromNode struct {
	Name     string        `json:"name"`
	ScanTime *time.Time    `json:"scanTime,omitempty"`
	Error    string        `json:"error,omitempty"`
	Findings []PromFinding `json:"findings,omitempty"`
	Pods     []PromPod     `json:"pods,omitempty"`

	up *bool
}

// PromFinding is one rule's findings on a node (cgwarden_audit_findings).
type PromFinding struct {
	Rule     string `json:"rule"`
	Severity string `json:"severity"`
	Count    int    `json:"count"`
}

// PromPod is one pod's series; null is a series Prometheus does not have
// (a figure the agent could not read is not exported), never 0.
type PromPod struct {
	Namespace       string   `json:"namespace"`
	Pod             string   `json:"pod"`
	UID             string   `json:"uid"`
	Weight          *float64 `json:"weight"`
	GuaranteedCores *float64 `json:"guaranteedCores"`
	UsageCores      *float64 `json:"usageCores"`
	WorkingSetBytes *float64 `json:"workingSetBytes"`
	// Containers counts the pod's containers (sandboxes are not
	// exported), Misplaced those outside the pod cgroup.
	Containers *int `json:"containers"`
	Misplaced  *int `json:"misplacedContainers"`
}

// promDocument gathers the query's samples by node.
func promDocument(k kind, vec model.Vector, at time.Time) *PromReport {
	doc := &PromReport{Kind: k.name, Source: "prometheus", Time: at.UTC(), Nodes: []PromNode{}}
	nodes := map[string]*PromNode{}
	nodeOf := func(m model.Metric) *PromNode {
		// the instance when scraped without the relabel to node (docs/alerts.md)
		name := cmp.Or(string(m["node"]), string(m["instance"]))
		n := nodes[name]
		if n == nil {
			n = &PromNode{Name: name}
			nodes[name] = n
		}
		return n
	}
	type podKey struct {
		node                *PromNode
		namespace, pod, uid string
	}
	pods := map[podKey]*PromPod{}
	podOf := func(n *PromNode, m model.Metric) *PromPod {
		k := podKey{n, string(m["namespace"]), string(m["pod"]), string(m["uid"])}
		if pods[k] == nil {
			pods[k] = &PromPod{Namespace: k.namespace, Pod: k.pod, UID: k.uid}
		}
		return pods[k]
	}
	for _, s := range vec {
		n, v := nodeOf(s.Metric), float64(s.Value)
		switch mk, name := string(s.Metric[marker]), string(s.Metric[model.MetricNameLabel]); {
		case mk == "up":
			up := v == 1
			n.up = &up
		case name == promScan:
			t := time.Unix(0, int64(v*1e9)).UTC()
			n.ScanTime = &t
		case name == promFindings:
			n.Findings = append(n.Findings, PromFinding{Rule: string(s.Metric["rule"]), Severity: string(s.Metric["severity"]), Count: int(v)})
		default:
			setPodSeries(podOf(n, s.Metric), mk, name, v)
		}
	}
	for k, p := range pods {
		k.node.Pods = append(k.node.Pods, *p)
	}
	for _, n := range nodes {
		switch {
		case n.up != nil && !*n.up:
			n.Error = "Prometheus's last scrape of the agent failed (up == 0): its series are gone; read the node with the port-forward (kubectl cgwarden " + k.name + " --node " + n.Name + ")"
		case n.ScanTime == nil:
			n.Error = "Prometheus has no " + promScan + " of the agent (no scan served yet, or another job)"
		}
		sortFindings(n.Findings)
		sort.Slice(n.Pods, func(i, j int) bool {
			a, b := n.Pods[i], n.Pods[j]
			return a.Namespace+"/"+a.Pod+"/"+a.UID < b.Namespace+"/"+b.Pod+"/"+b.UID
		})
		doc.Nodes = append(doc.Nodes, *n)
	}
	sort.Slice(doc.Nodes, func(i, j int) bool { return doc.Nodes[i].Name < doc.Nodes[j].Name })
	return doc
}

func setPodSeries(p *PromPod, mk, name string, v float64) {
	switch {
	case mk == "containers":
		n := int(v)
		p.Containers = &n
	case mk == "misplaced":
		n := int(v)
		p.Misplaced = &n
	case name == promWeight:
		p.Weight = &v
	case name == promGuaranteed:
		p.GuaranteedCores = &v
	case name == promUsed:
		p.UsageCores = &v
	case name == promMemory:
		p.WorkingSetBytes = &v
	}
}

// sortFindings orders a node's findings as the audit does: errors first,
// then warnings, then infos, by rule within each.
func sortFindings(fs []PromFinding) {
	rank := func(f PromFinding) int {
		if i := slices.Index([]string{"error", "warning", "info"}, f.Severity); i >= 0 {
			return i
		}
		return 3
	}
	slices.SortFunc(fs, func(a, b PromFinding) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a.Rule, b.Rule))
	})
}

// promClient is the Prometheus API at --prometheus, or through the API
// server's service proxy at --prometheus-service, with the kubeconfig's
// credentials; addr names it for the user.
func (o *Options) promClient(cc clientcmd.ClientConfig) (q instantQuerier, addr string, err error) {
	if o.Prometheus != "" {
		c, err := api.NewClient(api.Config{Address: o.Prometheus})
		if err != nil {
			return nil, "", fmt.Errorf("--prometheus %s: %w", o.Prometheus, err)
		}
		return promv1.NewAPI(c), o.Prometheus, nil
	}
	ns, svc, _ := strings.Cut(o.PrometheusService, "/")
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	// GET /api/v1/namespaces/NS/services/[SCHEME:]NAME:PORT/proxy/...:
	// the API server checks get (and, for the API's POSTed queries,
	// create) on services/proxy in NS.
	u := core.RESTClient().Get().Namespace(ns).Resource("services").Name(svc).SubResource("proxy").URL()
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	c, err := api.NewClient(api.Config{Address: u.String(), RoundTripper: rt})
	if err != nil {
		return nil, "", fmt.Errorf("--prometheus-service %s: %w", o.PrometheusService, err)
	}
	return promv1.NewAPI(c), u.String(), nil
}

// runPrometheus writes the fleet's table or document from one query.
func (o *Options) runPrometheus(ctx context.Context, out, errOut io.Writer, cc clientcmd.ClientConfig, sel selection, k kind) error {
	if k == auditKind && !sel.all {
		return fmt.Errorf("audit --prometheus counts findings by node, rule and severity (%s has no namespace or pod): add -A, or drop --prometheus to read namespace %s's findings from the agents", promFindings, sel.namespace)
	}
	q, addr, err := o.promClient(cc)
	if err != nil {
		return err
	}
	query := o.inspectQuery(sel)
	if k == auditKind {
		query = o.auditQuery()
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	at := time.Now()
	val, warnings, err := q.Query(ctx, query, at, promv1.WithTimeout(o.Timeout))
	if err != nil {
		return fmt.Errorf("querying Prometheus at %s: %w\nquery: %s", addr, err, query)
	}
	for _, w := range warnings {
		fmt.Fprintf(errOut, "Prometheus: %s\n", w)
	}
	vec, ok := val.(model.Vector)
	if !ok {
		return fmt.Errorf("querying Prometheus at %s: a %s, want a vector", addr, val.Type())
	}
	doc := promDocument(k, vec, at)
	doc.Prometheus, doc.Query = addr, query
	failed := 0
	for _, n := range doc.Nodes {
		if n.Error != "" {
			failed++
			fmt.Fprintf(errOut, "node %s: %s\n", n.Name, n.Error)
		}
	}
	if err := o.writeProm(out, doc, k); err != nil {
		return err
	}
	summary := promSummary(doc, o.PrometheusJob)
	if failed > 0 {
		return fmt.Errorf("%s; %d of them not scraped (named above)", summary, failed)
	}
	if len(doc.Nodes) == 0 {
		return fmt.Errorf("%s: is the agent scraped as job %q, with the relabel to node (docs/alerts.md, \"Scraping\")? (--prometheus-job)", summary, o.PrometheusJob)
	}
	fmt.Fprintln(errOut, summary)
	return nil
}

// promSummary says where the figures come from and how old they are.
func promSummary(doc *PromReport, job string) string {
	var ages []time.Duration
	for _, n := range doc.Nodes {
		if n.ScanTime != nil {
			ages = append(ages, doc.Time.Sub(*n.ScanTime))
		}
	}
	s := fmt.Sprintf("from Prometheus (%s), job %q: %d nodes", doc.Prometheus, job, len(doc.Nodes))
	if len(ages) > 0 {
		s += fmt.Sprintf(", their agents' scans %s to %s old (the agent's --interval plus the scrape interval)", slices.Min(ages).Round(time.Second), slices.Max(ages).Round(time.Second))
	}
	return s
}

// writeProm writes the document, or its table.
func (o *Options) writeProm(w io.Writer, doc *PromReport, k kind) error {
	if o.Output == "json" {
		return writeJSON(w, doc)
	}
	if k == auditKind {
		return writePromAuditTable(w, doc.Nodes)
	}
	return writePromInspectTable(w, doc.Nodes)
}
