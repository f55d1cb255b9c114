package hold_test

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/fairness"
	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/kubelettree"
	"github.com/cgwarden/cgwarden/internal/layout"
	"github.com/cgwarden/cgwarden/internal/poll"
	"github.com/cgwarden/cgwarden/internal/realtest"
	"github.com/cgwarden/cgwarden/internal/systemd"
)

// TestSystemdHolderHoldsThroughUnits is `serve --fix` (the agent) on a
// node whose kubelet uses the systemd driver, under a real systemd: the
// holder sets
// the BestEffort tier's and the sized pods' weights as unit properties,
// puts the tier back through systemd when the kubelet resets it (as the
// kubelet's QoS manager does: SetUnitProperties CPUWeight=1 on the tier),
// and daemon-reload then changes nothing, because systemd itself holds
// the property. It fails if the holder restores the file instead (the
// property would stay at the kubelet's 1).
func TestSystemdHolderHoldsThroughUnits(t *testing.T) {
	tree := realtest.NewSystemdTree(t)
	var kpods []kubelettree.Pod
	for i, milli := range []int64{1000, 4000} {
		p := kubelettree.Pod{Name: "vm-" + strconv.Itoa(i+1), UID: kubelettree.RandUID(), QoS: layout.BestEffort, MilliCPU: milli,
			ContainerID: strings.Repeat(strconv.Itoa(i+7), 64)}
		tree.Scope(tree.PodSlice(p.UID), p.ContainerID)
		kpods = append(kpods, p)
	}
	host, err := cgroupfs.OpenHost("/")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	bus, err := systemd.Open(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	lister := &pods{}
	lister.set(kubelettree.Metadata("default", kpods))
	jdir := t.TempDir()
	// The agent finds the node's systemd (systemd.OpenNode) on its own.
	o := fixOptions(tree.Root(), lister, jdir, weightRules...)
	o.MaxTierCPU, o.SizeCheck = "5", 100*time.Millisecond
	_, stop := startAgent(t, o)

	tierFile := path.Join("/sys/fs/cgroup", tree.CgroupOf(tree.Tier()), "cpu.weight")
	want := fairness.SharesToWeightLinear(2 + fairness.MilliCPUToShares(1000) + fairness.MilliCPUToShares(4000))
	tier := func() (string, uint64) {
		b, err := os.ReadFile(tierFile)
		if err != nil {
			t.Fatal(err)
		}
		v, err := bus.Property(tree.Tier(), systemd.CPUWeight)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b)), v
	}
	waitHeld := func(what string, limit time.Duration) time.Duration {
		t.Helper()
		from := time.Now()
		poll.Every(5*time.Millisecond).Until(t, limit, what+": the tier held", func() (bool, string, error) {
			f, p := tier()
			return f == strconv.FormatUint(want, 10) && p == want, fmt.Sprintf("cpu.weight %s, CPUWeight %d, want %d", f, p, want), nil
		})
		return time.Since(from)
	}
	waitHeld("the first plan", 60*time.Second)

	for i := range 3 {
		// The kubelet's QoS manager resets the tier through systemd.
		if err := tree.Conn.SetUnitProperties(tree.Tier(), true, sd.Property{Name: "CPUWeight", Value: godbus.MakeVariant(uint64(1))}); err != nil {
			t.Fatal(err)
		}
		off := waitHeld("after the kubelet's reset "+strconv.Itoa(i+1), 20*time.Second)
		t.Logf("MEASURE kubelet reset %d (SetUnitProperties CPUWeight=1 on the tier): held again through systemd after %v", i+1, off)
	}
	for i := range 5 {
		tree.Reload()
		f, p := tier()
		t.Logf("MEASURE daemon-reload %d: right after it the tier's cpu.weight is %s, CPUWeight %d (target %d)", i+1, f, p, want)
		if f != strconv.FormatUint(want, 10) || p != want {
			t.Errorf("daemon-reload %d: the tier's cpu.weight is %s, CPUWeight %d; want %d, held by systemd itself", i+1, f, p, want)
		}
	}
	stop()
	engine := &fix.Engine{FS: host, Base: tree.Root(), JournalDir: jdir, Units: bus} // `cgwarden revert`
	defer engine.Close()
	rep, err := engine.Revert(true)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failed()) > 0 {
		t.Fatalf("revert: %+v", rep.Failed())
	}
	if f, p := tier(); f != "1" || p != 1 {
		t.Errorf("after revert: the tier's cpu.weight %s, CPUWeight %d; want the kubelet's 1", f, p)
	}
}
