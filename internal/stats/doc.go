// Package stats reads the resource figures of one cgroup — CPU weight,
// quota, usage and throttling, memory usage, working set and limit, pids,
// pressure — from cgroup v1 or v2 files.
//
// Each file has a pure parser (parse.go) that takes the file's text, and
// the reader (read.go) that fetches the text through a cgroupfs.FS. A field
// whose file is missing or malformed is nil ("unknown"), never zero: kernels
// differ (cpu.idle arrived in 5.15, PSI needs CONFIG_PSI, v1 has no
// pressure files at all) and a zero that looks like data is how the
// kubelet came to report idle pods in the seeds.
package stats
