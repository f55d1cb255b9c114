package fairness

import "math"

// DemandGroup is one cgroup for WaterFill: its weight among its siblings,
// the CPU its own threads want, a cap, and its children.
type DemandGroup struct {
	Weight float64
	// Own are the demands (cores) of the threads sitting directly in the
	// group. In a leaf they are the group's demand. In a non-leaf (v1
	// only; v2 forbids it below the root) each competes with the child
	// groups like a group of ThreadWeight, as the scheduler treats a
	// nice-0 thread beside child groups.
	Own          []float64
	ThreadWeight float64
	// Cap is the most the group can use (its CFS quota in cores); +Inf or
	// 0 for none.
	Cap      float64
	Children []*DemandGroup

	// Demand is the group's effective demand, filled by WaterFill: its own
	// threads' and its children's demands, at most Cap.
	Demand float64
	// Fair is the group's fair share under the current demand, filled by
	// WaterFill.
	Fair float64
}

// WaterFill fills Demand and Fair for every group below root given the
// capacity (cores) of the root. This is the division the CPU scheduler
// converges to when demands hold steady: a parent's share is divided
// among its busy children (and, on v1, its own threads) in proportion to
// their weights; a child that wants less than its proportional part gets
// what it wants, and the surplus is divided again among the others by
// weight, until everyone is either satisfied or gets exactly the weighted
// part of what is left ("max-min fairness" with weights, applied top
// down). A group never gets more than its demand, so CPU nobody wants
// stays idle. Where Guarantee answers "what if everyone were busy",
// WaterFill answers "what should each get now".
//
// What it does not model: CPU affinity (a group pinned to fewer CPUs than
// its share), SCHED_IDLE groups, and the per-CPU granularity of the
// scheduler (one thread cannot use more than one core: callers cap thread
// demands at 1).
func WaterFill(root *DemandGroup, capacity float64) {
	demand(root)
	root.Fair = math.Min(capacity, root.Demand)
	fill(root)
}

func capOf(g *DemandGroup) float64 {
	if g.Cap <= 0 || math.IsNaN(g.Cap) {
		return math.Inf(1)
	}
	return g.Cap
}

func demand(g *DemandGroup) float64 {
	d := 0.0
	for _, t := range g.Own {
		d += math.Max(0, t)
	}
	for _, c := range g.Children {
		d += demand(c)
	}
	g.Demand = math.Min(d, capOf(g))
	return g.Demand
}

// fill divides g.Fair among g's children and, when it has children, its
// own threads.
func fill(g *DemandGroup) {
	if len(g.Children) == 0 {
		return
	}
	type entity struct {
		w, d  float64
		group *DemandGroup
		got   float64
		done  bool
	}
	var es []*entity
	for _, c := range g.Children {
		es = append(es, &entity{w: c.Weight, d: c.Demand, group: c})
	}
	tw := g.ThreadWeight
	if tw <= 0 {
		tw = ThreadWeightV1
	}
	for _, t := range g.Own {
		es = append(es, &entity{w: tw, d: math.Max(0, t)})
	}
	avail := g.Fair
	for {
		var sumW float64
		for _, e := range es {
			if !e.done && e.d > 0 && e.w > 0 {
				sumW += e.w
			}
		}
		if sumW == 0 {
			break
		}
		changed := false
		for _, e := range es {
			if e.done || e.d <= 0 || e.w <= 0 {
				continue
			}
			if share := avail * e.w / sumW; e.d <= share {
				e.got, e.done, changed = e.d, true, true
			}
		}
		if changed {
			avail = g.Fair
			for _, e := range es {
				if e.done {
					avail -= e.got
				}
			}
			continue
		}
		for _, e := range es {
			if !e.done && e.d > 0 && e.w > 0 {
				e.got, e.done = avail*e.w/sumW, true
			}
		}
		break
	}
	for _, e := range es {
		if e.group != nil {
			e.group.Fair = e.got
			fill(e.group)
		}
	}
}
