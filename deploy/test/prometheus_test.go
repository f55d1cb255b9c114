package deploytest

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the copies generated from deploy/prometheus (PrometheusRule, chart templates, kustomize)")

const (
	promDir       = "../prometheus"
	rulesFile     = promDir + "/cgwarden.rules.yaml"
	dashboardFile = promDir + "/dashboards/cgwarden.json"
	alertsDoc     = "../../docs/alerts.md"
	metricsDoc    = "../../docs/metrics.md"
)

// rules is a Prometheus rules file.
type rules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Record      string            `json:"record"`
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func readRules(t *testing.T) (rules, []byte) {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var r rules
	if err := yaml.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Groups) == 0 {
		t.Fatalf("%s: no groups", rulesFile)
	}
	return r, b
}

// promtool is Debian's promtool (package prometheus): the test skips
// without it, and fails when CGWARDEN_REQUIRE_REAL=1.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CGWARDEN_REQUIRE_REAL") == "1" {
			t.Fatal("promtool not found (apt-get install prometheus) and CGWARDEN_REQUIRE_REAL=1")
		}
		t.Skip("promtool not found (apt-get install prometheus)")
	}
	return p
}

func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPrometheusRules: promtool checks the rules file and runs its unit
// tests (tests/*.yaml).
func TestPrometheusRules(t *testing.T) {
	runPromtool(t, "check", "rules", rulesFile)
	tests, err := filepath.Glob(promDir + "/tests/*.yaml")
	if err != nil || len(tests) == 0 {
		t.Fatalf("no unit tests in %s/tests: %v", promDir, err)
	}
	out := runPromtool(t, append([]string{"test", "rules"}, tests...)...)
	if n := strings.Count(out, "SUCCESS"); n != len(tests) {
		t.Errorf("%d of %d unit test files passed:\n%s", n, len(tests), out)
	}
}

// unitTests is what the promtool unit test files hold.
type unitTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Alerts []struct {
			Name string `json:"alertname"`
			Exp  []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
		Exprs []struct {
			Expr string `json:"expr"`
		} `json:"promql_expr_test"`
	} `json:"tests"`
}

// TestPrometheusAlertsTestedAndDocumented: every alert has a unit test in
// which it fires and one in which it does not, a runbook_url to its own
// section of docs/alerts.md, and that section says what it means, what
// shows it and the fix; every recording rule is evaluated by a unit test.
func TestPrometheusAlertsTestedAndDocumented(t *testing.T) {
	r, _ := readRules(t)
	fires, quiet, exprs := map[string]bool{}, map[string]bool{}, ""
	files, _ := filepath.Glob(promDir + "/tests/*.yaml")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var u unitTests
		if err := yaml.Unmarshal(b, &u); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !slices.Equal(u.RuleFiles, []string{"../cgwarden.rules.yaml"}) {
			t.Errorf("%s tests %v, want the rules file itself", f, u.RuleFiles)
		}
		for _, tc := range u.Tests {
			for _, a := range tc.Alerts {
				if len(a.Exp) > 0 {
					fires[a.Name] = true
				} else {
					quiet[a.Name] = true
				}
			}
			for _, e := range tc.Exprs {
				exprs += " " + e.Expr
			}
		}
	}
	doc, err := os.ReadFile(alertsDoc)
	if err != nil {
		t.Fatal(err)
	}
	sections := strings.Split(string(doc), "\n### ")
	alerts := 0
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Record != "" {
				if !slices.Contains(metricTokens(exprs), rule.Record) {
					t.Errorf("recording rule %s: no promql_expr_test evaluates it", rule.Record)
				}
				continue
			}
			alerts++
			a := rule.Alert
			if !fires[a] || !quiet[a] {
				t.Errorf("alert %s: a unit test where it fires: %v, where it does not: %v", a, fires[a], quiet[a])
			}
			if want := "https://github.com/cgwarden/cgwarden/blob/main/docs/alerts.md#" + strings.ToLower(a); rule.Annotations["runbook_url"] != want {
				t.Errorf("alert %s: runbook_url %q, want %q", a, rule.Annotations["runbook_url"], want)
			}
			if rule.Annotations["summary"] == "" || rule.Annotations["description"] == "" {
				t.Errorf("alert %s: summary and description wanted", a)
			}
			var sec string
			for _, s := range sections {
				if strings.HasPrefix(s, a+"\n") {
					sec = s
				}
			}
			if sec == "" {
				t.Errorf("alert %s: no section \"### %s\" in docs/alerts.md", a, a)
				continue
			}
			for _, part := range []string{"**Means.**", "**Shows it.**", "**Fix.**"} {
				if !strings.Contains(sec, part) {
					t.Errorf("docs/alerts.md, %s: no %s", a, part)
				}
			}
		}
	}
	if alerts < 10 {
		t.Errorf("%d alerts in %s", alerts, rulesFile)
	}
}

// The copies generated from the rules file and the dashboard.
const (
	ruleHeader = "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: cgwarden\n"
	cmHeader   = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cgwarden-dashboard\n"
	generated  = "Generated from deploy/prometheus by deploy/test (go test -run TestPrometheusCopies -update); do not edit."
	gate       = `{{- if dig "prometheus" "enabled" false .Values.AsMap }}` + "\n"
)

// copies are the files generated from the rules file and the dashboard,
// by path.
func copies(t *testing.T) map[string]string {
	t.Helper()
	_, rb := readRules(t)
	i := bytes.Index(rb, []byte("\ngroups:\n"))
	if i < 0 {
		t.Fatalf("%s: no top-level groups:", rulesFile)
	}
	groups := indent(string(rb[i+1:]), "  ")
	dash, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(rb, []byte("`")) || bytes.Contains(dash, []byte("`")) {
		t.Fatal("a backquote in the rules or the dashboard: the chart's templates quote them with backquotes")
	}
	data := indent(string(dash), "    ")
	labels := "  labels:\n    app.kubernetes.io/name: cgwarden\n    app.kubernetes.io/part-of: cgwarden\n"
	plainRule := "# " + generated + "\n" + ruleHeader + "  namespace: cgwarden-system\n" + labels + "spec:\n" + groups
	plainCM := "# " + generated + "\n" + cmHeader + "  namespace: cgwarden-system\n" + labels + "    grafana_dashboard: \"1\"\ndata:\n  cgwarden.json: |\n" + data
	helmLabels := "  labels:\n    {{- include \"cgwarden.labels\" . | nindent 4 }}\n"
	helmRule := "{{- /* " + generated + " */}}\n" + gate + ruleHeader + "  namespace: {{ .Values.namespace }}\n" + helmLabels +
		"spec:\n{{`" + groups + "`}}\n{{- end }}\n"
	helmCM := "{{- /* " + generated + " */}}\n" + gate + cmHeader + "  namespace: {{ .Values.namespace }}\n" + helmLabels +
		"    grafana_dashboard: \"1\"\ndata:\n  cgwarden.json: |\n{{`" + data + "`}}\n{{- end }}\n"
	return map[string]string{
		promDir + "/prometheusrule.yaml":                            plainRule,
		kustDir + "/prometheus/prometheusrule.yaml":                 plainRule,
		kustDir + "/prometheus/dashboard.yaml":                      plainCM,
		chartDir + "/templates/prometheus-rules.yaml":               helmRule,
		chartDir + "/templates/prometheus-dashboard-configmap.yaml": helmCM,
	}
}

func indent(s, by string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = by + l
		}
	}
	return strings.Join(lines, "")
}

// TestPrometheusCopies: the PrometheusRule, the chart's templates and the
// kustomize directory are what the rules file and the dashboard generate
// (-update rewrites them).
func TestPrometheusCopies(t *testing.T) {
	for path, want := range copies(t) {
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v (go test -run TestPrometheusCopies -update writes it)", err)
		} else if string(got) != want {
			t.Errorf("%s differs from what deploy/prometheus generates: go test -run TestPrometheusCopies -update", path)
		}
	}
}

// TestChartAndKustomizeAgreeOnPrometheus: nothing of it by default; with
// prometheus.enabled the chart adds exactly the kustomize prometheus
// directory's objects; the PrometheusRule rendered by Helm holds the rules
// file's groups (its templates reach Prometheus unexpanded) and the
// ConfigMap the dashboard byte for byte.
func TestChartAndKustomizeAgreeOnPrometheus(t *testing.T) {
	base := helm(t, nil)
	for _, o := range base {
		if o["kind"] == "PrometheusRule" || strings.Contains(o.key(), "dashboard") {
			t.Errorf("%s rendered with prometheus.enabled unset", o.key())
		}
	}
	all := helm(t, map[string]any{"prometheus": map[string]any{"enabled": true}})
	var extra []object
	for _, o := range all {
		if !slices.ContainsFunc(base, func(b object) bool { return b.key() == o.key() }) {
			extra = append(extra, o)
		}
	}
	kust := kustomize(t, "prometheus")
	same(t, "prometheus", extra, kust)
	_, rb := readRules(t)
	var want map[string]any
	if err := yaml.Unmarshal(rb, &want); err != nil {
		t.Fatal(err)
	}
	dash, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range extra {
		switch o["kind"] {
		case "PrometheusRule":
			if got := o["spec"].(map[string]any)["groups"]; !reflect.DeepEqual(got, want["groups"]) {
				t.Errorf("the chart's PrometheusRule groups differ from %s", rulesFile)
			}
		case "ConfigMap":
			md := o["metadata"].(map[string]any)
			if md["labels"].(map[string]any)["grafana_dashboard"] != "1" {
				t.Errorf("%s: no label grafana_dashboard: \"1\"", o.key())
			}
			if got := o["data"].(map[string]any)["cgwarden.json"]; got != string(dash) {
				t.Errorf("%s: cgwarden.json differs from %s", o.key(), dashboardFile)
			}
		default:
			t.Errorf("unexpected %s", o.key())
		}
	}
	if len(extra) != 2 {
		t.Errorf("prometheus.enabled adds %v, want the PrometheusRule and the dashboard", keys(extra))
	}
}

// dashboard is the part of Grafana's dashboard model the test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Schema     int     `json:"schemaVersion"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string         `json:"name"`
			Type       string         `json:"type"`
			Query      any            `json:"query"`
			Datasource map[string]any `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource map[string]any `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		Expr       string         `json:"expr"`
		RefID      string         `json:"refId"`
		Datasource map[string]any `json:"datasource"`
	} `json:"targets"`
}

var templateVars = regexp.MustCompile(`\$\{?(\w+)\}?`)

// TestGrafanaDashboard: the dashboard parses; every panel but a row has
// a Prometheus data source, at least one target, each with an expression,
// a data source and its own refId; panels fit the 24-column grid without
// overlapping; every variable used is defined; and every expression (and
// every variable's query) parses as PromQL and names only series cgwarden
// documents or its rules record.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || d.UID == "" || d.Schema < 30 || len(d.Panels) < 10 {
		t.Fatalf("title %q, uid %q, schemaVersion %d, %d panels", d.Title, d.UID, d.Schema, len(d.Panels))
	}
	vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	var exprs []string
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "query" {
			q, _ := v.Query.(map[string]any)["query"].(string)
			inner := strings.TrimSuffix(strings.TrimPrefix(q, "label_values("), ")")
			if inner == q {
				t.Errorf("variable %s: query %q is not label_values(…)", v.Name, q)
			}
			// label_values(SERIES, LABEL): the series selector is PromQL.
			exprs = append(exprs, inner[:strings.LastIndex(inner, ",")])
		}
	}
	ids := map[int]bool{}
	var grid [][24]bool
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W < 1 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H < 1 {
			t.Errorf("panel %q: gridPos %+v outside the grid", p.Title, p.GridPos)
			continue
		}
		for len(grid) < p.GridPos.Y+p.GridPos.H {
			grid = append(grid, [24]bool{})
		}
		for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
			for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
				if grid[y][x] {
					t.Errorf("panel %q overlaps another at %d,%d", p.Title, x, y)
				}
				grid[y][x] = true
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource["type"] != "prometheus" || p.Datasource["uid"] == nil {
			t.Errorf("panel %q: data source %v, want Prometheus", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no target", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] || tg.Datasource["type"] != "prometheus" {
				t.Errorf("panel %q: target %q with refId %q, data source %v", p.Title, tg.Expr, tg.RefID, tg.Datasource)
			}
			refs[tg.RefID] = true
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, e := range exprs {
		for _, m := range templateVars.FindAllStringSubmatch(e, -1) {
			if !vars[m[1]] {
				t.Errorf("%q uses $%s, which the dashboard does not define", e, m[1])
			}
		}
	}
	// Every expression as a recording rule, variables given values, for
	// promtool to parse.
	var rs []map[string]string
	for i, e := range exprs {
		e = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$node", "n1", "$namespace", "default").Replace(e)
		rs = append(rs, map[string]string{"record": fmt.Sprintf("panel_%d", i), "expr": e})
	}
	y, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "panels", "rules": rs}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "panels.yaml")
	if err := os.WriteFile(f, y, 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, "check", "rules", f)
	known := documentedSeries(t)
	r, _ := readRules(t)
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Record != "" {
				known[rule.Record] = true
			}
		}
	}
	for _, e := range exprs {
		for _, m := range metricTokens(e) {
			if strings.Contains(m, "cgwarden_") && !known[baseName(m, known)] {
				t.Errorf("%q reads %s, which docs/metrics.md does not document and no rule records", e, m)
			}
		}
	}
}

var token = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// metricTokens are the identifiers of PromQL text (series, functions,
// labels), each once.
func metricTokens(expr string) []string {
	var out []string
	for _, m := range token.FindAllString(expr, -1) {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// baseName is a histogram's name for its _bucket, _sum and _count series.
func baseName(m string, known map[string]bool) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(m, suf); ok && known[b] {
			return b
		}
	}
	return m
}

var docName = regexp.MustCompile("`([a-z][a-z0-9_]*_[a-z0-9_]*)(\\{[^`]*\\})?`")

// documentedSeries are the series docs/metrics.md documents: the names in
// the first column of its tables.
func documentedSeries(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		first := strings.Split(l, " | ")[0]
		for _, m := range docName.FindAllStringSubmatch(first, -1) {
			out[m[1]] = true
		}
	}
	if len(out) < 40 {
		t.Fatalf("only %d series found in the tables of %s", len(out), metricsDoc)
	}
	return out
}

// TestEverySeriesHasAUse: every series docs/metrics.md documents is read
// by a rule or a dashboard panel, or listed there as for ad hoc use (the
// line starting "Ad hoc:"), and no series is both.
func TestEverySeriesHasAUse(t *testing.T) {
	_, rb := readRules(t)
	dash, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	var d dashboard
	if err := json.Unmarshal(dash, &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	var r rules
	if err := yaml.Unmarshal(rb, &r); err != nil {
		t.Fatal(err)
	}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			exprs = append(exprs, rule.Expr)
		}
	}
	known := documentedSeries(t)
	used := map[string]bool{}
	for _, e := range exprs {
		for _, m := range metricTokens(e) {
			used[baseName(m, known)] = true
			if strings.HasPrefix(m, "cgwarden_") && !known[baseName(m, known)] {
				t.Errorf("%q reads %s, which docs/metrics.md does not document", e, m)
			}
		}
	}
	doc, _ := os.ReadFile(metricsDoc)
	adhoc := map[string]bool{}
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "Ad hoc:") {
			for _, m := range docName.FindAllStringSubmatch(l, -1) {
				adhoc[m[1]] = true
			}
		}
	}
	var unused []string
	for s := range known {
		switch {
		case used[s] && adhoc[s]:
			t.Errorf("%s is read by a rule or panel and listed as ad hoc in docs/metrics.md", s)
		case !used[s] && !adhoc[s]:
			unused = append(unused, s)
		}
	}
	for s := range adhoc {
		if !known[s] {
			t.Errorf("docs/metrics.md lists %s as ad hoc but documents no such series", s)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Errorf("documented in docs/metrics.md, read by no rule or panel, not listed as ad hoc: %v", unused)
	}
}
