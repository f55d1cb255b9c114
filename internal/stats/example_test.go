package stats_test

import (
	"fmt"

	"github.com/cgwarden/cgwarden/internal/stats"
)

// The parsers take a file's text; an unlimited cpu.max is a quota of -1.
func ExampleParseCPUMax() {
	for _, text := range []string{"50000 100000\n", "max 100000\n"} {
		q, p, err := stats.ParseCPUMax(text)
		fmt.Println(q, p, err)
	}
	// Output:
	// 50000 100000 <nil>
	// -1 100000 <nil>
}

func ExampleParsePSI() {
	psi, err := stats.ParsePSI("some avg10=1.50 avg60=0.75 avg300=0.10 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=789\n")
	fmt.Println(psi.Some.Avg10, psi.Some.TotalUs, psi.Full.TotalUs, err)
	// Output:
	// 1.5 123456 789 <nil>
}

// A malformed file is an error, never a zero that looks like data.
func ExampleParseUint() {
	v, err := stats.ParseUint("4096\n")
	fmt.Println(v, err)
	_, err = stats.ParseUint("-1\n")
	fmt.Println(err != nil)
	// Output:
	// 4096 <nil>
	// true
}

func ExampleParseMeminfo() {
	m, err := stats.ParseMeminfo("MemTotal:       16303328 kB\nMemFree:        12633312 kB\nMemAvailable:   14000000 kB\n")
	fmt.Println(m.TotalBytes, m.FreeBytes, err)
	// Output:
	// 16694607872 12936511488 <nil>
}

func ExampleParsePIDs() {
	pids, err := stats.ParsePIDs("4127\n4128\n")
	fmt.Println(pids, err, stats.CountLines("4127\n4128\n"))
	// Output:
	// [4127 4128] <nil> 2
}
