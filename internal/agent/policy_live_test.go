package agent_test

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/agent"
	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// TestAuditAgreesWithTheHolderUnderATierCap: with --max-tier-cpu below
// the sum of the VM sizes, the holder holds the BestEffort tier at the
// capped weight, and the agent's own audit, judged by the same policy,
// says so (held-weights at the weight on disk) instead of calling the
// held tier a drift from the kubelet's value. Before the audit took the
// agent's policy, it computed the uncapped target, found the tier off it,
// and reported tier-drift for what the holder had just done on purpose.
func TestAuditAgreesWithTheHolderUnderATierCap(t *testing.T) {
	s := realtest.NewScratch(t)
	tree := realtest.NewVMTree(s, 1000, 2000, 4000) // 7 CPUs of VMs, capped at 1 (the default cap is the node's CPUs)
	pods := &lister{}
	pods.set(tree.Pods())
	o := &agent.Options{Listen: "127.0.0.1:0", Interval: 100 * time.Millisecond, SizeCheck: 50 * time.Millisecond,
		Fix: []string{"size-blind-weights", "besteffort-starvation"}, JournalDir: t.TempDir(),
		MaxTierCPU: "1", HostRoot: "/", Base: s.Name, Lister: pods, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		TrustSizes: "default"}
	a, _ := startAgent(t, o)
	tier := realtest.Kube + "/besteffort"

	// Wait for a picture taken after the holder set the tier and that
	// shows the tier as it stays.
	var report *audit.Report
	var weight uint64
	poll.Every(20*time.Millisecond).Until(t, 20*time.Second, "a held-weights finding at the tier's weight on disk", func() (bool, string, error) {
		pic := a.Loop.Latest()
		w := tree.Weight(tier)
		if pic != nil && w != tree.PodWeight(2) {
			if held, ok := find(pic.Report, rules.HeldWeights); ok {
				if v, _ := held.Evidence.Get("tierWeight"); fmt.Sprint(v) == fmt.Sprint(w) {
					report, weight = pic.Report, w
					return true, "", nil
				}
			}
		}
		var rules []string
		if pic != nil {
			for _, f := range pic.Report.Findings {
				rules = append(rules, f.Rule+": "+f.Evidence.Summary)
			}
		}
		return false, fmt.Sprintf("the tier at %d; the last audit:\n%s", w, strings.Join(rules, "\n")), nil
	})
	for _, f := range report.Findings {
		if f.Rule == rules.TierDrift && strings.HasSuffix(f.Subject.Cgroup, "besteffort") {
			t.Errorf("the audit calls the tier the holder holds (%d) a drift: %s", weight, f.Evidence.Summary)
		}
	}
}

func find(r *audit.Report, rule string) (audit.Finding, bool) {
	for _, f := range r.Findings {
		if f.Rule == rule {
			return f, true
		}
	}
	return audit.Finding{}, false
}
