package stats

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrSyntax is wrapped by every parse failure.
var ErrSyntax = errors.New("malformed cgroup file")

func syntax(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrSyntax, fmt.Sprintf(format, a...))
}

// ParseUint parses a file holding one unsigned integer.
func ParseUint(text string) (uint64, error) {
	s := strings.TrimSpace(text)
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, syntax("want one unsigned integer, got %q", clip(s))
	}
	return v, nil
}

// ParseInt parses a file holding one signed integer.
func ParseInt(text string) (int64, error) {
	s := strings.TrimSpace(text)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, syntax("want one integer, got %q", clip(s))
	}
	return v, nil
}

// ParseMax parses v2 "max"-or-number files (memory.max, pids.max);
// "max" is Unlimited.
func ParseMax(text string) (int64, error) {
	s := strings.TrimSpace(text)
	if s == "max" {
		return Unlimited, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, syntax(`want "max" or a non-negative integer, got %q`, clip(s))
	}
	return v, nil
}

// ParseCPUMax parses v2 cpu.max: "max 100000" or "<quota> <period>".
// The quota is Unlimited for "max".
func ParseCPUMax(text string) (quotaUs int64, periodUs uint64, err error) {
	f := strings.Fields(text)
	if len(f) != 2 {
		return 0, 0, syntax("cpu.max: want two fields, got %q", clip(text))
	}
	if periodUs, err = strconv.ParseUint(f[1], 10, 64); err != nil || periodUs == 0 {
		return 0, 0, syntax("cpu.max: bad period %q", clip(f[1]))
	}
	if f[0] == "max" {
		return Unlimited, periodUs, nil
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || q <= 0 {
		return 0, 0, syntax("cpu.max: bad quota %q", clip(f[0]))
	}
	return q, periodUs, nil
}

// v1MemoryUnlimited: the v1 "no limit" value is PAGE_COUNTER_MAX in bytes
// (9223372036854771712 on 4 KiB pages); anything this large is no limit.
const v1MemoryUnlimited = 1 << 62

// ParseV1MemoryLimit parses memory.limit_in_bytes.
func ParseV1MemoryLimit(text string) (int64, error) {
	v, err := ParseUint(text)
	if err != nil {
		return 0, err
	}
	if v >= v1MemoryUnlimited {
		return Unlimited, nil
	}
	return int64(v), nil
}

// EachKV calls fn for every "key value" line of a flat keyed file
// (cpu.stat, memory.stat, cpuacct.stat). It allocates nothing, which
// matters on a node scan of thousands of cgroups.
func EachKV(text string, fn func(key, value string) error) error {
	for len(text) > 0 {
		line, rest, _ := strings.Cut(text, "\n")
		text = rest
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, " ")
		if !ok || k == "" {
			return syntax("want \"key value\" lines, got %q", clip(line))
		}
		if err := fn(k, strings.TrimSpace(v)); err != nil {
			return err
		}
	}
	return nil
}

// KVUint parses the value of a flat keyed line.
func KVUint(key, value string) (uint64, error) {
	v, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		return 0, syntax("%s: want an unsigned integer, got %q", key, clip(value))
	}
	return v, nil
}

// ParsePSI parses a pressure file ("some avg10=0.00 avg60=0.00 avg300=0.00
// total=0" and, except for cpu on old kernels, a "full" line).
func ParsePSI(text string) (PSI, error) {
	var p PSI
	var seen bool
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			return PSI{}, syntax("pressure: want 5 fields, got %q", clip(line))
		}
		// The kernel writes the four keys in this order (kernel/sched/psi.c);
		// a line that repeats or lacks one would leave a silent 0.
		var l PSILine
		for i, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k != psiKeys[i] {
				return PSI{}, syntax("pressure: want %s=<value>, got %q", psiKeys[i], clip(kv))
			}
			var err error
			switch k {
			case "avg10":
				l.Avg10, err = percent(v)
			case "avg60":
				l.Avg60, err = percent(v)
			case "avg300":
				l.Avg300, err = percent(v)
			case "total":
				l.TotalUs, err = strconv.ParseUint(v, 10, 64)
			}
			if err != nil {
				return PSI{}, syntax("pressure: bad %q", clip(kv))
			}
		}
		switch {
		case f[0] == "some" && !seen:
			p.Some, seen = l, true
		case f[0] == "full" && p.Full == nil:
			p.Full = &l
		default:
			return PSI{}, syntax("pressure: unexpected line %q", clip(f[0]))
		}
	}
	if !seen {
		return PSI{}, syntax("pressure: no \"some\" line")
	}
	return p, nil
}

var psiKeys = [4]string{"avg10", "avg60", "avg300", "total"}

// percent parses a PSI average: a finite share between 0 and 100 (NaN or
// Inf from a hostile file would also break JSON encoding downstream).
func percent(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0 && f <= 100) {
		return 0, errors.New("not a percentage")
	}
	return f, nil
}

// CountLines counts the non-empty lines of cgroup.procs or tasks.
func CountLines(text string) int {
	n := 0
	for len(text) > 0 {
		line, rest, _ := strings.Cut(text, "\n")
		if strings.TrimSpace(line) != "" {
			n++
		}
		text = rest
	}
	return n
}

// ParsePIDs parses cgroup.procs or tasks into numbers.
func ParsePIDs(text string) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(text) {
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 {
			return nil, syntax("want process ids, got %q", clip(f))
		}
		out = append(out, v)
	}
	return out, nil
}

// clip keeps error messages short when a hostile file is huge.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
