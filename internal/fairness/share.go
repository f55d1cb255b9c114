package fairness

// Group is one cgroup as the CPU scheduler sees it.
type Group struct {
	// Weight is the group's weight among its siblings (raw shares or
	// weight; only ratios between siblings matter).
	Weight float64
	// Threads is the number of threads sitting directly in this group
	// beside its child groups (v1 only; v2 forbids it below the root).
	// Each competes with the children like a group of ThreadWeight.
	Threads int
	// ThreadWeight is the weight of one such thread (ThreadWeightV1).
	ThreadWeight float64
	Children     []*Group

	// Guaranteed is the output of Guarantee, in cores.
	Guaranteed float64
}

// Guarantee fills Guaranteed for every group below root: the CPU (in
// cores) a group gets when every group and every thread is busy, which is
// the capacity times the product, from root down, of the group's weight
// over the sum of its siblings' weights (threads sitting in a non-leaf
// parent counted as siblings of ThreadWeight each). The root is
// guaranteed the whole capacity.
func Guarantee(root *Group, capacity float64) {
	root.Guaranteed = capacity
	guarantee(root)
}

func guarantee(g *Group) {
	sum := float64(g.Threads) * g.ThreadWeight
	for _, c := range g.Children {
		sum += c.Weight
	}
	for _, c := range g.Children {
		if sum > 0 {
			c.Guaranteed = g.Guaranteed * c.Weight / sum
		}
		guarantee(c)
	}
}
