// Package inventory builds cgwarden's picture of a node: every cgroup of
// the hierarchy with its identity (package layout) and figures (package
// stats), the pods and containers they belong to — misplaced ones
// attached to their pod, wherever they sit — and the CPU each cgroup is
// guaranteed under full contention (package fairness).
//
// Open reads the node's mounts and CPU count through a cgroupfs.FS (the
// live host or a snapshot); Scan walks the tree once (and reads
// /proc/meminfo); Rate turns two scans into CPU rates and FairShare two
// thread readings into the demand-aware fair share. Sampling is the one
// loop that strings these together over a node's samples: every path that
// pictures a node (the CLI live or from a snapshot, snapshot capture,
// serve, the tests) goes through it, so the figures agree. The
// guaranteed-CPU rule for threads in non-leaf cgroups is documented on
// Scanner.guarantee.
package inventory
