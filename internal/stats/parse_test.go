package stats

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// wantSyntax fails unless err wraps ErrSyntax.
func wantSyntax(t *testing.T, in string, err error) {
	t.Helper()
	if !errors.Is(err, ErrSyntax) {
		t.Errorf("%q: error %v does not wrap ErrSyntax", in, err)
	}
}

func TestParseUint(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"1024\n", 1024, true},
		{"  0  ", 0, true},
		{"18446744073709551615\n", 18446744073709551615, true},
		{"18446744073709551616", 0, false},
		{"-1", 0, false},
		{"", 0, false},
		{"\n", 0, false},
		{"12 13", 0, false},
		{"0x10", 0, false},
		{"1_000", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseUint(tc.in)
		if tc.ok {
			if err != nil || got != tc.want {
				t.Errorf("ParseUint(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
			continue
		}
		wantSyntax(t, tc.in, err)
	}
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"-1\n", -1, true},
		{"100000", 100000, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"9223372036854775808", 0, false},
		{"max", 0, false},
		{"", 0, false},
		{"1.5", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseInt(tc.in)
		if tc.ok {
			if err != nil || got != tc.want {
				t.Errorf("ParseInt(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
			continue
		}
		wantSyntax(t, tc.in, err)
	}
}

func TestParseMax(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"max\n", Unlimited, true},
		{"629145600\n", 629145600, true},
		{"0", 0, true},
		{"-1", 0, false}, // v2 writes "max", never -1
		{"Max", 0, false},
		{"max max", 0, false},
		{"", 0, false},
		{"9223372036854775808", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseMax(tc.in)
		if tc.ok {
			if err != nil || got != tc.want {
				t.Errorf("ParseMax(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
			continue
		}
		wantSyntax(t, tc.in, err)
	}
}

func TestParseCPUMax(t *testing.T) {
	tests := []struct {
		in     string
		quota  int64
		period uint64
		ok     bool
	}{
		{"max 100000\n", Unlimited, 100000, true},
		{"50000 100000\n", 50000, 100000, true},
		{"1000 1000", 1000, 1000, true},
		{"400000 100000", 400000, 100000, true},
		{"max", 0, 0, false},
		{"50000", 0, 0, false},
		{"50000 100000 1", 0, 0, false},
		{"0 100000", 0, 0, false},
		{"-1 100000", 0, 0, false},
		{"max 0", 0, 0, false},
		{"max -5", 0, 0, false},
		{"abc 100000", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tc := range tests {
		q, p, err := ParseCPUMax(tc.in)
		if tc.ok {
			if err != nil || q != tc.quota || p != tc.period {
				t.Errorf("ParseCPUMax(%q) = %d, %d, %v; want %d, %d", tc.in, q, p, err, tc.quota, tc.period)
			}
			continue
		}
		wantSyntax(t, tc.in, err)
	}
}

func TestParseV1MemoryLimit(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		// PAGE_COUNTER_MAX * 4096: "no limit" on x86-64 (this machine's
		// root memory.limit_in_bytes).
		{"9223372036854771712\n", Unlimited, true},
		// PAGE_COUNTER_MAX * 65536 rounds differently on 64 KiB-page arm64.
		{"9223372036854710272", Unlimited, true},
		{"9223372036854775807", Unlimited, true},
		{"18446744073709551615", Unlimited, true},
		{"4611686018427387903", 4611686018427387903, true}, // 2^62-1: a (silly) real limit
		{"536870912\n", 536870912, true},
		{"0", 0, true},
		{"-1", 0, false}, // written to set no limit, never read back
		{"", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseV1MemoryLimit(tc.in)
		if tc.ok {
			if err != nil || got != tc.want {
				t.Errorf("ParseV1MemoryLimit(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
			continue
		}
		wantSyntax(t, tc.in, err)
	}
}

func TestEachKV(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want [][2]string
		ok   bool
	}{
		{"v1 cpu.stat", "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n", [][2]string{{"nr_periods", "0"}, {"nr_throttled", "0"}, {"throttled_time", "0"}}, true},
		{"no final newline", "user 55074\nsystem 17083", [][2]string{{"user", "55074"}, {"system", "17083"}}, true},
		{"blank lines", "\na 1\n\n\nb 2\n", [][2]string{{"a", "1"}, {"b", "2"}}, true},
		{"extra spaces in value", "a   7  \n", [][2]string{{"a", "7"}}, true},
		{"empty", "", nil, true},
		{"no value", "total_rss\n", nil, false},
		{"no key", " 12\n", nil, false},
		{"second line bad", "a 1\nbroken\n", [][2]string{{"a", "1"}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got [][2]string
			err := EachKV(tc.in, func(k, v string) error {
				got = append(got, [2]string{k, v})
				return nil
			})
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil {
				wantSyntax(t, tc.in, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("pairs = %q, want %q", got, tc.want)
			}
		})
	}
	// A callback's error stops the walk and comes back as is.
	stop := errors.New("stop")
	n := 0
	err := EachKV("a 1\nb 2\nc 3\n", func(k, v string) error {
		n++
		if k == "b" {
			return stop
		}
		return nil
	})
	if err != stop || n != 2 {
		t.Errorf("callback error: got %v after %d calls, want stop after 2", err, n)
	}
}

func TestKVUint(t *testing.T) {
	if v, err := KVUint("k", "42"); err != nil || v != 42 {
		t.Errorf("KVUint(42) = %d, %v", v, err)
	}
	_, err := KVUint("total_rss", "-3")
	wantSyntax(t, "-3", err)
	if err == nil || !strings.Contains(err.Error(), "total_rss") {
		t.Errorf("error %v does not name the key", err)
	}
}

func TestParsePSI(t *testing.T) {
	full := func(a10, a60, a300 float64, total uint64) *PSILine {
		return &PSILine{a10, a60, a300, total}
	}
	tests := []struct {
		name string
		in   string
		want PSI
		ok   bool
	}{
		{
			name: "cpu.pressure with full (5.13+)",
			in:   "some avg10=27.33 avg60=45.62 avg300=27.23 total=149735342\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
			want: PSI{Some: PSILine{27.33, 45.62, 27.23, 149735342}, Full: full(0, 0, 0, 0)},
			ok:   true,
		},
		{
			name: "cpu.pressure without full (before 5.13)",
			in:   "some avg10=0.12 avg60=0.05 avg300=0.01 total=118421\n",
			want: PSI{Some: PSILine{0.12, 0.05, 0.01, 118421}},
			ok:   true,
		},
		{
			name: "io.pressure",
			in:   "some avg10=0.00 avg60=0.06 avg300=0.18 total=4279576\nfull avg10=0.00 avg60=0.01 avg300=0.09 total=3171374",
			want: PSI{Some: PSILine{0, 0.06, 0.18, 4279576}, Full: full(0, 0.01, 0.09, 3171374)},
			ok:   true,
		},
		{name: "empty", in: ""},
		{name: "full only", in: "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"},
		{name: "two some lines", in: "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nsome avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"},
		{name: "unknown line", in: "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\npart avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"},
		{name: "four fields", in: "some avg10=0.00 avg60=0.00 avg300=0.00\n"},
		{name: "repeated key", in: "some avg10=1.00 avg10=2.00 avg10=3.00 total=0\n"},
		{name: "keys out of order", in: "some avg60=0.00 avg10=0.00 avg300=0.00 total=0\n"},
		{name: "no equals", in: "some avg10 avg60=0.00 avg300=0.00 total=0\n"},
		{name: "NaN", in: "some avg10=NaN avg60=0.00 avg300=0.00 total=0\n"},
		{name: "Inf", in: "some avg10=+Inf avg60=0.00 avg300=0.00 total=0\n"},
		{name: "negative", in: "some avg10=-1.00 avg60=0.00 avg300=0.00 total=0\n"},
		{name: "negative total", in: "some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePSI(tc.in)
			if !tc.ok {
				wantSyntax(t, tc.in, err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v (full %+v), want %+v (full %+v)", got, got.Full, tc.want, tc.want.Full)
			}
		})
	}
}

func TestCountLines(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"\n", 0},
		{"1\n", 1},
		{"1\n2\n3\n", 3},
		{"1\n\n  \n2", 2},
		{"4127", 1},
	}
	for _, tc := range tests {
		if got := CountLines(tc.in); got != tc.want {
			t.Errorf("CountLines(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestParsePIDs(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		ok   bool
	}{
		{"", nil, true},
		{"2311\n2350\n", []int{2311, 2350}, true},
		{"1", []int{1}, true},
		{"0\n", nil, false},
		{"-4\n", nil, false},
		{"12\nabc\n", nil, false},
		{"99999999999999999999", nil, false},
	}
	for _, tc := range tests {
		got, err := ParsePIDs(tc.in)
		if !tc.ok {
			wantSyntax(t, tc.in, err)
			if got != nil {
				t.Errorf("ParsePIDs(%q) returned %v beside its error", tc.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParsePIDs(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestClip(t *testing.T) {
	long := strings.Repeat("x", 10000)
	_, err := ParseUint(long)
	if err == nil || len(err.Error()) > 200 {
		t.Errorf("error for a 10000-byte file is %d bytes long, want it clipped", len(err.Error()))
	}
}

// Fuzzing: no parser panics, and every failure wraps ErrSyntax.

func fuzzSeeds(f *testing.F, seeds ...string) {
	for _, s := range seeds {
		f.Add(s)
	}
}

func checkErr(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, ErrSyntax) {
		t.Fatalf("error %v does not wrap ErrSyntax", err)
	}
}

func FuzzParseUint(f *testing.F) {
	fuzzSeeds(f, "1024\n", "-1", "", "18446744073709551616")
	f.Fuzz(func(t *testing.T, s string) { _, err := ParseUint(s); checkErr(t, err) })
}

func FuzzParseInt(f *testing.F) {
	fuzzSeeds(f, "-1\n", "100000", "", "9223372036854775808")
	f.Fuzz(func(t *testing.T, s string) { _, err := ParseInt(s); checkErr(t, err) })
}

func FuzzParseMax(f *testing.F) {
	fuzzSeeds(f, "max\n", "629145600", "-1", "")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseMax(s)
		checkErr(t, err)
		if err == nil && v < 0 && v != Unlimited {
			t.Fatalf("ParseMax(%q) = %d", s, v)
		}
	})
}

func FuzzParseCPUMax(f *testing.F) {
	fuzzSeeds(f, "max 100000\n", "50000 100000", "0 0", "max")
	f.Fuzz(func(t *testing.T, s string) {
		q, p, err := ParseCPUMax(s)
		checkErr(t, err)
		if err == nil && (p == 0 || (q <= 0 && q != Unlimited)) {
			t.Fatalf("ParseCPUMax(%q) = %d, %d", s, q, p)
		}
	})
}

func FuzzParseV1MemoryLimit(f *testing.F) {
	fuzzSeeds(f, "9223372036854771712\n", "536870912", "-1", "")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseV1MemoryLimit(s)
		checkErr(t, err)
		if err == nil && v < 0 && v != Unlimited {
			t.Fatalf("ParseV1MemoryLimit(%q) = %d", s, v)
		}
	})
}

func FuzzEachKV(f *testing.F) {
	fuzzSeeds(f, "nr_periods 0\nnr_throttled 0\n", "a\n", " 1", "\n\n")
	f.Fuzz(func(t *testing.T, s string) {
		err := EachKV(s, func(k, v string) error {
			if k == "" || strings.Contains(k, "\n") || strings.Contains(v, "\n") {
				t.Fatalf("bad pair %q %q", k, v)
			}
			return nil
		})
		checkErr(t, err)
	})
}

func FuzzParsePSI(f *testing.F) {
	fuzzSeeds(f,
		"some avg10=27.33 avg60=45.62 avg300=27.23 total=149735342\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=0.12 avg60=0.05 avg300=0.01 total=118421\n", "", "full a=b c d e")
	f.Fuzz(func(t *testing.T, s string) {
		_, err := ParsePSI(s)
		checkErr(t, err)
	})
}

func FuzzCountLines(f *testing.F) {
	fuzzSeeds(f, "1\n2\n", "", "\n\n \n")
	f.Fuzz(func(t *testing.T, s string) {
		if n := CountLines(s); n < 0 || n > strings.Count(s, "\n")+1 {
			t.Fatalf("CountLines(%q) = %d", s, n)
		}
	})
}

func FuzzParsePIDs(f *testing.F) {
	fuzzSeeds(f, "2311\n2350\n", "0", "", "-1 x")
	f.Fuzz(func(t *testing.T, s string) {
		pids, err := ParsePIDs(s)
		checkErr(t, err)
		for _, p := range pids {
			if p <= 0 {
				t.Fatalf("ParsePIDs(%q) gave pid %d", s, p)
			}
		}
	})
}

// FuzzKeyedFiles feeds one text to the keyed-file readers the Reader uses.
func FuzzKeyedFiles(f *testing.F) {
	fuzzSeeds(f, "usage_usec 18446744073709551615\n", "user 55074\nsystem 17083\n", "total_rss 1\ntotal_inactive_file x\n")
	f.Fuzz(func(t *testing.T, s string) {
		var c CPU
		var m Memory
		checkErr(t, parseThrottling(s, &c))
		checkErr(t, parseCPUStatV2(s, &c))
		checkErr(t, parseMemoryStat(s, &m, false))
		checkErr(t, parseMemoryStat(s, &m, true))
	})
}
