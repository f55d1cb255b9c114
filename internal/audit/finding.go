package audit

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/weights"
)

// Severity says how urgent a finding is.
type Severity string

const (
	// Error: something is broken now (a pod is starved, its metrics are
	// wrong, its limits do not apply).
	Error Severity = "error"
	// Warning: something will break under load or drifts from what the
	// kubelet intends.
	Warning Severity = "warning"
	// Info: worth knowing, nothing breaks.
	Info Severity = "info"
)

// severities lists the severities, most severe first.
var severities = []Severity{Error, Warning, Info}

// Rank orders severities, most severe first (0).
func (s Severity) Rank() int {
	if i := slices.Index(severities, s); i >= 0 {
		return i
	}
	return len(severities)
}

// ParseSeverity reads a --fail-on value.
func ParseSeverity(s string) (Severity, error) {
	if v := Severity(strings.ToLower(strings.TrimSpace(s))); slices.Contains(severities, v) {
		return v, nil
	}
	return "", fmt.Errorf("severity %q: want error, warning or info", s)
}

// Subject is what a finding is about. Kind is "pod", "container", "tier"
// or "cgroup"; the other fields are filled as far as they are known.
type Subject struct {
	Kind        string `json:"kind"`
	PodUID      string `json:"podUID,omitempty"`
	PodName     string `json:"podName,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Container   string `json:"containerName,omitempty"`
	ContainerID string `json:"containerID,omitempty"`
	Cgroup      string `json:"cgroup,omitempty"`
}

// String names the subject for people: the pod's namespace/name when
// known, else its UID; containers by name, else by short ID.
func (s Subject) String() string {
	pod := s.PodUID
	if s.PodName != "" {
		pod = s.PodName
		if s.Namespace != "" {
			pod = s.Namespace + "/" + s.PodName
		}
	}
	switch s.Kind {
	case "pod":
		return "pod " + pod
	case "container":
		c := cmp.Or(s.Container, layout.ShortID(s.ContainerID))
		if pod == "" {
			return "container " + c
		}
		return "container " + c + " of pod " + pod
	}
	if s.PodName != "" {
		return s.Kind + " " + s.Cgroup + " (pod " + pod + ")"
	}
	return s.Kind + " " + s.Cgroup
}

// Evidence is the numbers behind a finding: a one-line summary for people
// and the same figures as named values for tools. Values keep their order.
type Evidence struct {
	Summary string
	Values  []Value
}

// Value is one named figure of the evidence.
type Value struct {
	Name  string
	Value any
}

// Add appends a named value and returns the evidence, for chaining.
func (e *Evidence) Add(name string, v any) *Evidence {
	e.Values = append(e.Values, Value{name, v})
	return e
}

// Get returns the value called name.
func (e Evidence) Get(name string) (any, bool) {
	for _, v := range e.Values {
		if v.Name == name {
			return v.Value, true
		}
	}
	return nil, false
}

// MarshalJSON writes {"summary": ..., <values in order>}.
func (e Evidence) MarshalJSON() ([]byte, error) {
	s, _ := json.Marshal(e.Summary) // a string always marshals
	b := bytes.NewBufferString(`{"summary":`)
	b.Write(s)
	for _, v := range e.Values {
		k, _ := json.Marshal(v.Name)
		val, err := json.Marshal(v.Value)
		if err != nil {
			return nil, fmt.Errorf("evidence %s: %w", v.Name, err)
		}
		fmt.Fprintf(b, ",%s:%s", k, val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Finding is one problem found on the node.
type Finding struct {
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	Subject  Subject  `json:"subject"`
	Evidence Evidence `json:"evidence"`
	// Message is the consequence, in the words of the person paged.
	Message string `json:"message"`
	// Remedy is what to change by hand today.
	Remedy string `json:"remedy"`
	// Brief is the finding's key figures in one line, for the human
	// output once the rule has been explained in full (Evidence.Summary
	// when empty).
	Brief string `json:"-"`
}

// Policy is what the rules judge by that is the operator's choice. The
// agent audits with the same Policy as its holder holds weights by (one
// config: agent.Config), so a finding never contradicts what it does.
type Policy struct {
	// StarvationCores is the besteffort-starvation threshold (0:
	// DefaultStarvationCores).
	StarvationCores float64
	// MaxTierMilliCPU caps the sizes the BestEffort tier's weight counts
	// (--max-tier-cpu; 0: the node's CPUs), as the holder and `fix` do:
	// held-weights and tier-drift compare the tier with the capped target.
	MaxTierMilliCPU int64
}

// Input is what the rules read.
type Input struct {
	Node *inventory.Node
	// Meta is the pod (and VM) metadata; nil when none was given.
	Meta *metadata.Set
	Policy

	views     map[string]weights.View // sized BestEffort pods by UID
	viewsHeld bool
	viewsDone bool
}

// sized returns the weights view of a sized BestEffort pod: its targets
// and its guarantee under them (computed once per run).
func (in *Input) sized(uid string) (weights.View, bool) {
	in.loadViews()
	v, ok := in.views[uid]
	return v, ok
}

func (in *Input) loadViews() {
	if !in.viewsDone {
		in.viewsDone = true
		vs, held := weights.Views(in.Node, in.Meta, in.MaxTierMilliCPU)
		in.views, in.viewsHeld = map[string]weights.View{}, held
		for _, v := range vs {
			in.views[v.Pod.UID] = v
		}
	}
}

// DefaultStarvationCores is the default besteffort-starvation threshold.
const DefaultStarvationCores = 0.05

// Rule is one check.
type Rule struct {
	ID    string
	Check func(in *Input, r *Report)
}

// Rules in the order findings of equal severity are listed.
var Rules = []Rule{
	{rules.BestEffortStarvation, checkStarvation},
	{rules.SizeBlindWeights, checkSizeBlind},
	{rules.HeldWeights, checkHeldWeights},
	{rules.MisplacedContainer, checkMisplaced},
	{rules.ForeignCgroup, checkForeign},
	{rules.PodAccountingGap, checkAccountingGap},
	{rules.EscapedProcess, checkEscaped},
	{rules.TierDrift, checkTierDrift},
	{rules.OrphanCgroup, checkOrphans},
	{rules.IgnoredSize, checkIgnoredSizes},
}

// Report is the outcome of an audit.
type Report struct {
	Findings []Finding `json:"findings"`
	// Notes say which checks could not be made and what they miss.
	Notes []string `json:"notes,omitempty"`
	// Sizes is where each declared pod size came from (nil: none).
	Sizes *Sizes `json:"sizes,omitempty"`
	// NodeInfo is what the Node object says of the node (the container
	// runtime), from the metadata; JSON puts it in the node header.
	NodeInfo metadata.NodeInfo `json:"-"`
}

func (r *Report) add(f Finding) { r.Findings = append(r.Findings, f) }

func (r *Report) note(format string, a ...any) {
	n := fmt.Sprintf(format, a...)
	if !slices.Contains(r.Notes, n) {
		r.Notes = append(r.Notes, n)
	}
}

// Run applies every rule to the input and sorts the findings.
func Run(in *Input) *Report {
	if in.StarvationCores <= 0 {
		in.StarvationCores = DefaultStarvationCores
	}
	r := &Report{Findings: []Finding{}, NodeInfo: in.Meta.NodeInfo()}
	if in.Node == nil {
		return r
	}
	r.Sizes = sizesOf(in.Meta)
	for _, rule := range Rules {
		rule.Check(in, r)
	}
	Sort(r.Findings)
	return r
}

// Sort orders findings: severity, then rule order, then subject.
func Sort(fs []Finding) {
	order := map[string]int{}
	for i, r := range Rules {
		order[r.ID] = i
	}
	slices.SortStableFunc(fs, func(a, b Finding) int {
		if c := a.Severity.Rank() - b.Severity.Rank(); c != 0 {
			return c
		}
		if c := order[a.Rule] - order[b.Rule]; c != 0 {
			return c
		}
		return strings.Compare(a.Subject.String()+a.Subject.Cgroup, b.Subject.String()+b.Subject.Cgroup)
	})
}

// count is the number of findings of each severity.
func (r *Report) count() map[Severity]int {
	c := map[Severity]int{}
	for _, f := range r.Findings {
		c[f.Severity]++
	}
	return c
}

// AtOrAbove reports whether any finding is at least as severe as s.
func (r *Report) AtOrAbove(s Severity) bool {
	for _, f := range r.Findings {
		if f.Severity.Rank() <= s.Rank() {
			return true
		}
	}
	return false
}
