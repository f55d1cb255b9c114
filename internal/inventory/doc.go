// Package inventory builds cgwarden's picture of a node: every cgroup of
// the hierarchy with its identity (package layout) and figures (package
// stats), the pods and containers they belong to — misplaced ones
// attached to their pod, wherever they sit — and the CPU each cgroup is
// guaranteed under full contention (package fairness).
//
// Open reads the node's mounts and CPU count through a cgroupfs.FS (the
// live host or a snapshot); Scan walks the tree once; Rate turns two scans
// into CPU rates. The guaranteed-CPU rule for threads in non-leaf cgroups
// is documented on Node.Guarantee.
package inventory
