package events

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/cgwarden/cgwarden/internal/apiconn"
	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/inventory"
)

// Component is the source of cgwarden's Events.
const Component = "cgwarden"

// MaxPerScan bounds the finding Events of one scan.
const MaxPerScan = 20

// ForgetAfter is how many scans in a row a finding must be absent from
// before it is gone: one that comes back sooner is the same finding (a
// scan in the middle of a repair, or of a runtime's own change, can miss
// it once), not a new one to report again.
const ForgetAfter = 3

// Notifier turns findings and fixes into Events.
type Notifier struct {
	rec  record.EventRecorder
	node string
	log  *slog.Logger
	max  int

	mu sync.Mutex
	// seen holds the reported findings, with the scans in a row each has
	// been absent from.
	seen map[string]int
	pods map[string]*inventory.Pod // by UID, from the last scan
	// pending are fixes for pods no scan has named yet (a fix applied
	// before the first scan): reported at the next scan.
	pending []fixed
}

type fixed struct{ uid, reason, message string }

// New records Events through the API server (the ServiceAccount needs
// create and patch on events). stop flushes and stops the recorder.
func New(cfg *rest.Config, node string, log *slog.Logger) (n *Notifier, stop func(), err error) {
	// Not the caller's context: the recorder lives until stop, which
	// flushes it, not until the start-up that built it ends.
	rec, stop, err := apiconn.EventRecorder(context.Background(), cfg, corev1.EventSource{Component: Component, Host: node}, nil)
	if err != nil {
		return nil, nil, err
	}
	return NewWithRecorder(rec, node, log), stop, nil
}

// NewWithRecorder uses rec (client-go's record.FakeRecorder in tests).
func NewWithRecorder(rec record.EventRecorder, node string, log *slog.Logger) *Notifier {
	if log == nil {
		log = slog.Default()
	}
	return &Notifier{rec: rec, node: node, log: log.With("component", "events"), max: MaxPerScan, seen: map[string]int{}, pods: map[string]*inventory.Pod{}}
}

// Reason is a rule's Event reason: "misplaced-container" → "MisplacedContainer".
func Reason(rule string) string {
	var b strings.Builder
	for _, part := range strings.Split(rule, "-") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

func (n *Notifier) nodeRef() *corev1.ObjectReference {
	// The kubelet's own convention: a Node's events name it by name, with
	// its name as UID.
	return &corev1.ObjectReference{Kind: "Node", Name: n.node, UID: types.UID(n.node)}
}

func podRef(p *inventory.Pod) *corev1.ObjectReference {
	if p == nil || p.Name == "" {
		return nil
	}
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID)}
}

// Findings reports the findings of one scan that were not in the previous
// one.
func (n *Notifier) Findings(node *inventory.Node, r *audit.Report) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pods = map[string]*inventory.Pod{}
	for _, p := range node.Pods {
		n.pods[p.UID] = p
	}
	for _, f := range n.pending {
		ref := podRef(n.pods[f.uid])
		if ref == nil {
			ref = n.nodeRef()
		}
		n.rec.Event(ref, corev1.EventTypeNormal, f.reason, clip(f.message))
	}
	n.pending = nil
	now := map[string]bool{}
	sent := 0
	var unsent []string
	for _, f := range r.Findings {
		key := findingKey(f)
		if now[key] {
			continue // the same subject twice in one scan: one Event
		}
		now[key] = true
		if _, ok := n.seen[key]; ok {
			continue
		}
		if sent == n.max {
			unsent = append(unsent, key)
			continue
		}
		sent++
		typ := corev1.EventTypeWarning
		if f.Severity == audit.Info {
			typ = corev1.EventTypeNormal
		}
		msg := f.Message
		if f.Evidence.Summary != "" {
			msg += " Evidence: " + f.Evidence.Summary
		}
		if ref := podRef(n.pods[f.Subject.PodUID]); ref != nil {
			n.rec.Event(ref, typ, Reason(f.Rule), clip(msg))
		} else {
			n.rec.Event(n.nodeRef(), typ, Reason(f.Rule), clip(f.Subject.String()+": "+msg))
		}
	}
	if len(unsent) > 0 {
		n.rec.Event(n.nodeRef(), corev1.EventTypeWarning, "ManyFindings",
			fmt.Sprintf("%d more new findings in this scan are not reported as Events (at most %d per scan): `cgwarden audit` on the node lists them", len(unsent), n.max))
		// Not marked seen: they are reported in later scans, within the
		// bound, until each has had its Event.
		for _, k := range unsent {
			delete(now, k)
		}
	}
	for k := range n.seen {
		if !now[k] {
			if n.seen[k]++; n.seen[k] >= ForgetAfter {
				delete(n.seen, k)
			}
		}
	}
	for k := range now {
		n.seen[k] = 0
	}
}

// findingKey is what makes a finding the same from one scan to the next:
// its rule and what it is about by identity — pod UID and container ID —
// not by the names a scan knew (a container's name can be unknown in one
// scan and known in the next) nor by its cgroup (a container being
// adopted is found at its old place, then its new one). Findings about
// no pod (a tier, a cgroup) are keyed by their subject and cgroup.
func findingKey(f audit.Finding) string {
	s := f.Subject
	if s.PodUID != "" {
		return f.Rule + "\x00" + s.Kind + "\x00" + s.PodUID + "\x00" + s.ContainerID
	}
	return f.Rule + "\x00" + s.String() + "\x00" + s.Cgroup
}

// Fixed reports a fix applied for a pod (by UID; the node when the pod is
// not known by name).
func (n *Notifier) Fixed(podUID, reason, message string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ref := podRef(n.pods[podUID])
	if ref == nil {
		// Not named by a scan yet: the next scan names it (or it went,
		// and the Event goes to the node).
		if len(n.pending) < 1000 {
			n.pending = append(n.pending, fixed{podUID, reason, message})
		}
		return
	}
	n.rec.Event(ref, corev1.EventTypeNormal, reason, clip(message))
}

// Pod reports something done to a pod known by its API identity rather
// than by a scan (the NRI plugin sees a pod before any scan names it).
func (n *Notifier) Pod(namespace, name, uid, reason, message string) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: name, UID: types.UID(uid)}
	n.rec.Event(ref, corev1.EventTypeNormal, reason, clip(message))
}

// clip keeps a message within the API server's limit for Event messages
// (1 KiB is what the kubelet's correlator keeps).
func clip(s string) string {
	if len(s) <= 1024 {
		return s
	}
	return s[:1021] + "..."
}

// Applied reports a fix run: one Event per pod it changed, saying what.
func (n *Notifier) Applied(steps []Step) {
	type acc struct {
		rule string
		what []string
	}
	byPod := map[string]*acc{}
	var order []string
	for _, s := range steps {
		a, ok := byPod[s.Pod]
		if !ok {
			a = &acc{rule: s.Rule}
			byPod[s.Pod] = a
			order = append(order, s.Pod)
		}
		a.what = append(a.what, s.Description)
	}
	for _, uid := range order {
		a := byPod[uid]
		reason := "Cgwarden" + Reason(a.rule) + "Fixed"
		n.Fixed(uid, reason, strings.Join(a.what, "; "))
	}
}

// Step is one applied operation as Applied reports it.
type Step struct {
	Pod, Rule, Description string
}
