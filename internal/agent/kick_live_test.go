package agent_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/agent"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
)

// TestKickedScansKeepTheSchedule: scans asked for (Fresh: the weight
// holder's kicks) do not push the loop's next tick away. Twenty kicks in
// a row, then none: the next scan must still come about one interval
// after the last kicked one. Before, each kicked scan added an interval
// to the old schedule, so twenty of them put the next tick twenty
// intervals away, and /readyz went stale ("the last good scan is N s
// old") with the loop idle: the agent of every part, after a fixing
// agent, in the cluster lane.
func TestKickedScansKeepTheSchedule(t *testing.T) {
	s := realtest.NewScratch(t)
	tree := realtest.NewVMTree(s, 500)
	pods := &lister{}
	pods.set(tree.Pods())
	const interval = 300 * time.Millisecond
	o := &agent.Options{Listen: "127.0.0.1:0", Interval: interval, HostRoot: "/", Base: s.Name, Lister: pods,
		Log: slog.New(slog.DiscardHandler), TrustSizes: "default"}
	a, _ := startAgent(t, o)
	const kicks = 20
	for i := 0; i < kicks; i++ {
		if _, _, err := a.Loop.Fresh(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	last := a.Loop.Latest()
	kicked := time.Now()
	// Generous: five intervals for one, on a loaded machine; the bug
	// waited twenty.
	limit := 5 * interval
	poll.Every(10*time.Millisecond).UntilTrue(t, limit, fmt.Sprintf("a scan after %d kicked scans (interval %v; if none, the kicks pushed the schedule away)", kicks, interval), func() bool {
		return a.Loop.Latest() != last
	})
	t.Logf("next scan %v after the last kicked one (interval %v)", time.Since(kicked).Round(time.Millisecond), interval)
}
