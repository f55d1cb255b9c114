package journal

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cgwarden/cgwarden/internal/plan"
)

// node is a model of what the journal records about a node: cgroup files
// with values, cgroup directories with processes. It stands in for the
// cgroup filesystem (the fix engine's live tests cover the real one); what
// is under test here is the journal: what it keeps and how large it grows.
type node struct {
	files map[string]string
	dirs  map[string][]int
}

const (
	tier       = "/cpu/kubepods/besteffort/cpu.shares"
	kubeletSet = "2" // what the kubelet writes to the BestEffort tier
	held       = "1500"
)

// churn runs kubelet resets and adoptions through a journal as the agent
// does, with pods coming and going in a fixed number of slots: each
// adoption's pod replaces the one adopted slots adoptions before, whose
// cgroup (and everything cgwarden made in it) the kubelet removed.
type churn struct {
	j     *Journal
	n     node
	slots int
	pods  []string // the live pod of each slot
	srcs  []string // the runtime's cgroup of its container
	count int
	// maxSize is the largest the journal file has been.
	maxSize int64
}

func newChurn(t testing.TB, dir string, slots int) *churn {
	c := &churn{j: New(dir), n: node{files: map[string]string{tier: kubeletSet}, dirs: map[string][]int{}}, slots: slots, pods: make([]string, slots), srcs: make([]string, slots)}
	t.Cleanup(func() { c.j.Close() })
	return c
}

func (c *churn) gone(s *Step) bool {
	switch s.Op.Kind {
	case plan.Write:
		_, ok := c.n.files[s.Op.Path]
		return !ok
	case plan.Mkdir:
		_, ok := c.n.dirs[s.Op.Path]
		return !ok
	case plan.Move:
		_, ok := c.n.dirs[s.Op.Pairs[0].Target]
		return !ok
	}
	return false
}

// run appends one run as the fix engine does: intent (with the state it
// replaces) before each operation, its outcome after, then compacts if the
// journal outgrew its bound.
func (c *churn) run(t testing.TB, ops ...func(run string) error) {
	if err := c.j.Lock(); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("run-%d", c.count)
	c.count++
	c.must(t, Entry{Type: Begin, Apply: id})
	for _, op := range ops {
		if err := op(id); err != nil {
			t.Fatal(err)
		}
	}
	c.must(t, Entry{Type: End, Apply: id})
	c.maxSize = max(c.maxSize, c.j.Size())
	if err := c.j.CompactIfLarge(c.gone); err != nil {
		t.Fatal(err)
	}
	if err := c.j.Unlock(); err != nil {
		t.Fatal(err)
	}
}

func (c *churn) must(t testing.TB, e Entry) Entry {
	e, err := c.j.Append(e)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// write journals and applies one write.
func (c *churn) write(t testing.TB, p, v string) func(string) error {
	return func(run string) error {
		prev := c.n.files[p]
		op := plan.Op{Kind: plan.Write, Path: p, Value: v}
		in := c.must(t, Entry{Type: Intent, Apply: run, Op: &op, Prev: &plan.Prev{Value: &prev}})
		c.n.files[p] = v
		c.must(t, Entry{Type: Done, Apply: run, Ref: in.Seq})
		return nil
	}
}

// reset is the kubelet writing the tier back, and the weight holder
// writing its target again: without a journal line when the journal holds
// the tier's first value (it always does after the first), as hold does.
// Every tenth reset, an adoption's plan writes the tier too (journaled:
// its value then is cgwarden's own), which compaction must not let
// replace the kubelet's original.
func (c *churn) reset(t testing.TB, i int) {
	c.n.files[tier] = kubeletSet
	entries, err := c.j.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !Written(Applies(entries))[tier] {
		c.run(t, c.write(t, tier, held))
		return
	}
	c.n.files[tier] = held
	if i%10 == 0 {
		c.run(t, c.write(t, tier, held))
	}
}

// adopt replaces slot i's pod with a new one whose container the runtime
// put outside it, and adopts the container: mkdir the container cgroup
// in the pod, write its weight, move its processes.
func (c *churn) adopt(t testing.TB, i int) {
	slot := i % c.slots
	if old := c.pods[slot]; old != "" {
		// The pod was deleted: the kubelet removed its cgroup with the
		// one cgwarden made in it, the runtime the emptied source.
		delete(c.n.dirs, old)
		delete(c.n.dirs, old+"/ctr")
		delete(c.n.files, old+"/ctr/cpu.shares")
		delete(c.n.dirs, c.srcs[slot])
	}
	pod := fmt.Sprintf("/cpu/kubepods/besteffort/pod-%d", i)
	src := fmt.Sprintf("/cpu/system.slice/misplaced-%d", i)
	c.pods[slot], c.srcs[slot] = pod, src
	c.n.dirs[pod] = nil
	c.n.dirs[src] = []int{1000 + i, 2000 + i}
	tgt := pod + "/ctr"
	c.run(t, func(run string) error {
		op := plan.Op{Kind: plan.Mkdir, Path: tgt}
		in := c.must(t, Entry{Type: Intent, Apply: run, Op: &op, Prev: &plan.Prev{}})
		c.n.dirs[tgt] = nil
		c.n.files[tgt+"/cpu.shares"] = "1024"
		c.must(t, Entry{Type: Done, Apply: run, Ref: in.Seq})
		return nil
	}, c.write(t, tgt+"/cpu.shares", "2"), func(run string) error {
		op := plan.Op{Kind: plan.Move, Pairs: []plan.Pair{{Source: src, Target: tgt}}}
		pids := c.n.dirs[src]
		in := c.must(t, Entry{Type: Intent, Apply: run, Op: &op, Prev: &plan.Prev{Pids: map[string][]int{src: pids}}})
		c.must(t, Entry{Type: Progress, Apply: run, Ref: in.Seq, Pids: Bare(pids)})
		c.n.dirs[tgt], c.n.dirs[src] = pids, nil
		c.must(t, Entry{Type: Done, Apply: run, Ref: in.Seq})
		return nil
	})
}

// revertAll undoes every pending step, newest first, as `revert --all`
// does on the node model.
func (c *churn) revertAll(t testing.TB) {
	entries, err := c.j.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	runs := Applies(entries)
	for i := len(runs) - 1; i >= 0; i-- {
		for _, s := range runs[i].Pending() {
			switch s.Op.Kind {
			case plan.Write:
				if _, ok := c.n.files[s.Op.Path]; ok {
					c.n.files[s.Op.Path] = *s.Prev.Value
				}
			case plan.Mkdir:
				if len(c.n.dirs[s.Op.Path]) > 0 {
					t.Fatalf("revert: %s still holds %v", s.Op.Path, c.n.dirs[s.Op.Path])
				}
				delete(c.n.dirs, s.Op.Path)
				for p := range c.n.files {
					if path.Dir(p) == s.Op.Path {
						delete(c.n.files, p)
					}
				}
			case plan.Move:
				pr := s.Op.Pairs[0]
				c.n.dirs[pr.Source] = append(c.n.dirs[pr.Source], c.n.dirs[pr.Target]...)
				c.n.dirs[pr.Target] = nil
			}
		}
	}
}

// shmDir is a directory on tmpfs when the machine has one: each append
// fsyncs, and 100,000 runs of fsyncs on a disk take an hour. What is
// measured is the journal's own work and size.
func shmDir(t testing.TB) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err == nil && st.Type == 0x01021994 { // TMPFS_MAGIC
		dir, err := os.MkdirTemp("/dev/shm", "cgwarden-journal-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// churnN is how many resets and adoptions TestJournalStaysSmall runs: the
// issue's 100,000 take about 70 s of CPU, too much for every test run, so
// the default is 20,000 (-short: 5,000); `go test -run
// TestJournalStaysSmall ./internal/journal -churn 100000` runs them all.
var churnN = flag.Int("churn", 20_000, "kubelet resets and adoptions TestJournalStaysSmall runs through the journal")

// TestJournalStaysSmall runs -churn kubelet resets and as many adoptions
// (of as many pods, 50 alive at a time) through one journal, compacting as
// the fix engine does. The journal never grows past its bound — twice its
// compacted size or MinCompactSize, plus one run — which is set by the 50
// live pods, not by the history; and revert --all then restores the
// kubelet's original tier weight and every live container's processes.
func TestJournalStaysSmall(t *testing.T) {
	const slots = 50
	n := *churnN
	if testing.Short() {
		n = min(n, 5_000)
	}
	c := newChurn(t, shmDir(t), slots)
	for i := range n {
		c.reset(t, i)
		c.adopt(t, i)
	}
	if err := c.j.Lock(); err != nil {
		t.Fatal(err)
	}
	live := Compact(c.j.Entries(), c.gone)
	var liveSize int64
	for _, e := range live {
		b, _ := jsonLine(e)
		liveSize += int64(len(b))
	}
	size := c.j.Size()
	c.j.Unlock()
	const oneRun = 2 << 10 // an adoption's run is about 1.2 KiB
	bound := max(MinCompactSize, 2*liveSize) + oneRun
	t.Logf("%d resets and adoptions: journal %d bytes now, %d at most; live state %d bytes in %d entries; bound %d",
		n, size, c.maxSize, liveSize, len(live), bound)
	if c.maxSize > bound {
		t.Errorf("the journal grew to %d bytes, past its bound %d", c.maxSize, bound)
	}
	if runs := Applies(live); len(runs) > slots+2 {
		t.Errorf("%d runs kept for %d live pods", len(runs), slots)
	}

	want := map[string][]int{}
	for _, pod := range c.pods {
		i := strings.TrimPrefix(pod, "/cpu/kubepods/besteffort/pod-")
		var k int
		fmt.Sscan(i, &k)
		want[fmt.Sprintf("/cpu/system.slice/misplaced-%d", k)] = []int{1000 + k, 2000 + k}
	}
	c.revertAll(t)
	if got := c.n.files[tier]; got != kubeletSet {
		t.Errorf("after revert --all the tier holds %q, want the kubelet's %q", got, kubeletSet)
	}
	for src, pids := range want {
		if got := c.n.dirs[src]; !slices.Equal(got, pids) {
			t.Errorf("after revert --all %s holds %v, want %v", src, got, pids)
		}
	}
	for _, pod := range c.pods {
		if _, ok := c.n.dirs[pod+"/ctr"]; ok {
			t.Errorf("after revert --all %s/ctr, made by cgwarden, is still there", pod)
		}
	}
}

func jsonLine(e Entry) ([]byte, error) {
	b, err := json.Marshal(e)
	return append(b, '\n'), err
}
