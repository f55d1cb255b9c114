package audit

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cgwarden/cgwarden/internal/rules"
	"github.com/cgwarden/cgwarden/internal/weights"
)

// checkHeldWeights reports, once, that every sized BestEffort pod and the
// BestEffort tier are at the weights their sizes call for, with what the
// pods would be guaranteed at the kubelet's weights: information, and a
// warning of what removing cgwarden does.
func checkHeldWeights(in *Input, r *Report) {
	if in.Meta == nil || in.Node == nil {
		return
	}
	in.loadViews()
	if !in.viewsHeld || len(in.views) == 0 {
		return
	}
	vs := slices.SortedFunc(maps.Values(in.views), func(a, b weights.View) int { return int(b.MilliCPU - a.MilliCPU) })
	var rows []map[string]any
	var parts []string
	for _, v := range vs {
		rows = append(rows, map[string]any{"pod": v.Pod.Label(), "sizeCores": float64(v.MilliCPU) / 1000, "weight": v.Target,
			"guaranteedCores": round(v.Guaranteed), "guaranteedCoresAtKubeletWeights": round(v.AtKubelet)})
		if len(parts) < 6 {
			parts = append(parts, fmt.Sprintf("%s (%s) at %d: guaranteed %s cores, %s at the kubelet's weights", v.Pod.Label(), cpuCount(v.MilliCPU), v.Target, cores(v.Guaranteed), cores(v.AtKubelet)))
		}
	}
	tier := vs[0].Pod.Cgroup.Parent
	ev := Evidence{Summary: fmt.Sprintf("%s at %d; %s", tier.Path, vs[0].TierTarget, strings.Join(parts, ", "))}
	ev.Add("tierWeight", vs[0].TierTarget).Add("pods", rows)
	r.add(Finding{Rule: rules.HeldWeights, Severity: Info, Subject: Subject{Kind: "cgroup", Cgroup: tier.Path}, Evidence: ev,
		Message: fmt.Sprintf("The weights of %s follow their sizes, as if they requested them. The kubelet resets the BestEffort tier to the minimum within a minute: they stay only while `cgwarden serve --fix` holds them, and removing it gives the starvation back.",
			plural(len(vs), "sized BestEffort pod")),
		Remedy: "Nothing to do while cgwarden holds them. To make it lasting without cgwarden, give these pods CPU requests from their size when they are created.",
	})
}
