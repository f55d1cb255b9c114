package stats

// Stats is what cgwarden knows of one cgroup at one instant. Every pointer
// is nil when unknown.
type Stats struct {
	CPU      CPU       `json:"cpu"`
	Memory   Memory    `json:"memory"`
	Pids     Pids      `json:"pids"`
	Pressure *Pressure `json:"pressure,omitempty"`
	// Procs is the number of processes directly in the cgroup
	// (cgroup.procs), Threads the number of threads directly in it (v1
	// tasks; read only for non-leaf v1 cgroups, where threads compete with
	// child groups). Procs is also nil where the reader was told to skip
	// it (Reader.SkipProcs): nothing used the count there.
	Procs   *int `json:"procs,omitempty"`
	Threads *int `json:"threads,omitempty"`
	// Gone is set when the cgroup vanished while it was read.
	Gone bool `json:"gone,omitempty"`
}

// Unlimited is the value of a limit field that is set to "no limit".
const Unlimited = -1

// CPU figures. Times are in nanoseconds whatever the version.
type CPU struct {
	// Weight is the raw content of the weight file: v1 cpu.shares
	// (2..262144) or v2 cpu.weight (1..10000).
	Weight *uint64 `json:"weight"`
	// QuotaUs is the CFS quota per period in µs, Unlimited for none.
	QuotaUs  *int64  `json:"quotaUs"`
	PeriodUs *uint64 `json:"periodUs"`
	// Idle is cpu.idle (1 = SCHED_IDLE group); kernels before 5.15 lack it.
	Idle *int64 `json:"idle,omitempty"`

	UsageNs *uint64 `json:"usageNs"`
	// UserNs and SystemNs split UsageNs; known on v2 only (v1's
	// cpuacct.stat is not read).
	UserNs   *uint64 `json:"userNs,omitempty"`
	SystemNs *uint64 `json:"systemNs,omitempty"`

	Periods     *uint64 `json:"periods,omitempty"`
	Throttled   *uint64 `json:"throttled,omitempty"`
	ThrottledNs *uint64 `json:"throttledNs,omitempty"`
}

// Memory figures in bytes. WorkingSetBytes follows the kubelet: usage minus
// inactive file pages, floored at 0.
type Memory struct {
	UsageBytes        *uint64 `json:"usageBytes"`
	WorkingSetBytes   *uint64 `json:"workingSetBytes"`
	RSSBytes          *uint64 `json:"rssBytes,omitempty"`
	InactiveFileBytes *uint64 `json:"inactiveFileBytes,omitempty"`
	// LimitBytes is the hard limit, Unlimited for none.
	LimitBytes      *int64  `json:"limitBytes"`
	PageFaults      *uint64 `json:"pageFaults,omitempty"`
	MajorPageFaults *uint64 `json:"majorPageFaults,omitempty"`
}

// Pids figures. Max is Unlimited for "max". Current is also nil where
// Reader.SkipProcs left it out (it spared no list there).
type Pids struct {
	Current *uint64 `json:"current,omitempty"`
	Max     *int64  `json:"max,omitempty"`
}

// Pressure is PSI (v2 only, CONFIG_PSI). A resource whose file is missing
// is nil.
type Pressure struct {
	CPU    *PSI `json:"cpu,omitempty"`
	Memory *PSI `json:"memory,omitempty"`
	IO     *PSI `json:"io,omitempty"`
}

// PSI is one pressure file: the share of time some (or all) tasks were
// stalled, as averages in percent and a total in µs.
type PSI struct {
	Some PSILine  `json:"some"`
	Full *PSILine `json:"full,omitempty"`
}

// PSILine is one line of a pressure file.
type PSILine struct {
	Avg10   float64 `json:"avg10"`
	Avg60   float64 `json:"avg60"`
	Avg300  float64 `json:"avg300"`
	TotalUs uint64  `json:"totalUs"`
}
