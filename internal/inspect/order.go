package inspect

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/cgwarden/cgwarden/internal/inventory"
)

// SortKeys are the --sort-by values: name sorts A to Z, the figures
// largest first (what a reader looks for), unknown figures last.
var SortKeys = []string{"name", "cpu", "memory", "guaranteed", "weight"}

// Order returns the comparison of cgroups for a --sort-by key; nil for
// "" (the scan's order).
func Order(key string) (func(a, b *inventory.Cgroup) int, error) {
	var fig func(c *inventory.Cgroup) *float64
	switch key {
	case "":
		return nil, nil
	case "name":
		return func(a, b *inventory.Cgroup) int { return strings.Compare(a.Name(), b.Name()) }, nil
	case "cpu":
		fig = func(c *inventory.Cgroup) *float64 { return c.UsageCores }
	case "memory":
		fig = func(c *inventory.Cgroup) *float64 { return u64f(c.Stats.Memory.WorkingSetBytes) }
	case "guaranteed":
		fig = func(c *inventory.Cgroup) *float64 { v := c.GuaranteedCores; return &v }
	case "weight":
		fig = func(c *inventory.Cgroup) *float64 { return u64f(c.Stats.CPU.Weight) }
	default:
		return nil, fmt.Errorf("--sort-by %q: want one of %s", key, strings.Join(SortKeys, ", "))
	}
	return func(a, b *inventory.Cgroup) int {
		byFig := nilLast(fig(a), fig(b), func(x, y *float64) int { return cmp.Compare(*y, *x) })
		return cmp.Or(byFig, strings.Compare(a.Name(), b.Name()))
	}, nil
}

// nilLast compares x and y by order, nil after the rest (two nils are
// equal).
func nilLast[T any](x, y *T, order func(x, y *T) int) int {
	switch {
	case x == nil && y == nil:
		return 0
	case x == nil:
		return 1
	case y == nil:
		return -1
	}
	return order(x, y)
}

func u64f(p *uint64) *float64 {
	if p == nil {
		return nil
	}
	v := float64(*p)
	return &v
}

// SortPods orders pods by their pod cgroups (pods known only by misplaced
// containers by their first container's cgroup).
func SortPods(pods []*inventory.Pod, order func(a, b *inventory.Cgroup) int) {
	if order == nil {
		return
	}
	of := func(p *inventory.Pod) *inventory.Cgroup {
		if p.Cgroup != nil {
			return p.Cgroup
		}
		if len(p.Containers) > 0 {
			return p.Containers[0].Cgroup
		}
		return nil
	}
	slices.SortStableFunc(pods, func(a, b *inventory.Pod) int { return nilLast(of(a), of(b), order) })
}
