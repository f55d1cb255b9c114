// Package fairness holds the arithmetic of CPU weights: the kubelet's and
// the runtimes' conversions between CPU requests, v1 shares and v2 weights,
// and the division of CPU among a tree of weighted groups — what each group
// is guaranteed when every group is busy.
//
// It works on its own small Group tree so that the arithmetic can be
// tested without cgroups; package inventory builds that tree from a scan.
package fairness
