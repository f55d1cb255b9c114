package vmsize

import (
	"strings"
	"testing"
)

// --max-size, as the agent (cgwarden serve) and the sizer both parse it:
// each namespace's bound, the "*" default, and a precise error for each
// way the flag can be wrong.
func TestParseMaxSizes(t *testing.T) {
	m, err := ParseMaxSizes(" tenant=2, *=8 ,batch=2500m")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.String(), "*=8,batch=2500m,tenant=2"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for ns, want := range map[string]Bound{
		"tenant": {MilliCPU: 2000, Namespace: "tenant", Entry: "tenant=2"},
		"batch":  {MilliCPU: 2500, Namespace: "batch", Entry: "batch=2500m"},
		"other":  {MilliCPU: 8000, Namespace: "other", Entry: "*=8"},
	} {
		if got := m.For(ns); got != want {
			t.Errorf("For(%q) = %+v, want %+v", ns, got, want)
		}
	}
	if got := m.For("tenant").String(); got != "namespace tenant's --max-size bound tenant=2" {
		t.Errorf("the bound says %q", got)
	}
	// Without "*", a namespace not named is not bounded.
	only, err := ParseMaxSizes("tenant=2")
	if err != nil {
		t.Fatal(err)
	}
	if b := only.For("other"); b != (Bound{}) {
		t.Errorf("a namespace not named, no *: %+v, want no bound", b)
	}
	for _, none := range []string{"", "  "} {
		m, err := ParseMaxSizes(none)
		if err != nil || m != (MaxSizes{}) || m.For("any") != (Bound{}) || m.String() != "" {
			t.Errorf("ParseMaxSizes(%q) = %v, %v; want no bound", none, m, err)
		}
	}
	// Copies of one parse are equal (metadata.Trust is compared).
	if c := m; c != m {
		t.Error("a copy of a MaxSizes is not equal to it")
	}

	for _, c := range []struct{ in, says string }{
		{"tenant", `entry "tenant": want NAMESPACE=CPU`},
		{"tenant:2", `entry "tenant:2": want NAMESPACE=CPU`},
		{"=2", `names no namespace`},
		{"tenant=", `entry "tenant=" gives no CPU quantity`},
		{"tenant=2,", "entry 2 is empty"},
		{",tenant=2", "entry 1 is empty"},
		{"a=1,,b=1", "entry 2 is empty"},
		{"tenant=1,tenant=2", "namespace tenant is bounded twice"},
		{"*=1,b=1,*=2", "namespace * is bounded twice"},
		{"Tenant=2", `"Tenant" is not a namespace name`},
		{"team/a=2", `"team/a" is not a namespace name`},
		{"**=2", `"**" is not a namespace name`},
		{"tenant=0", "bound 0m: a size must be above 0"},
		{"tenant=0m", "must be above 0"},
		{"tenant=-1", `CPU quantity "-1" is negative`},
		{"tenant=8193", "above 8192 CPUs, which no node has"},
		{"tenant=1e12", "which no node has"},
		{"tenant=9e2337203372", "too large an exponent"},
		{"tenant=lots", `CPU quantity "lots"`},
		{"tenant=2=3", `CPU quantity "2=3"`},
	} {
		m, err := ParseMaxSizes(c.in)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseMaxSizes(%q) = %v, %v; want an error saying %q", c.in, m, err, c.says)
		}
	}
}

// Limit: the lower of the namespace's bound and the node's allocatable
// CPU, either possibly unknown; a tie is the node's.
func TestBoundLimit(t *testing.T) {
	b := Bound{MilliCPU: 2000, Namespace: "tenant", Entry: "tenant=2"}
	for _, c := range []struct {
		b           Bound
		alloc       int64
		limit       int64
		byNamespace bool
	}{
		{b, 0, 2000, true},
		{b, 4000, 2000, true},
		{b, 1000, 1000, false},
		{b, 2000, 2000, false},
		{Bound{}, 4000, 4000, false},
		{Bound{}, 0, 0, false},
	} {
		limit, byNS := c.b.Limit(c.alloc)
		if limit != c.limit || byNS != c.byNamespace {
			t.Errorf("%+v.Limit(%d) = %d, %v; want %d, %v", c.b, c.alloc, limit, byNS, c.limit, c.byNamespace)
		}
	}
}

// FuzzParseMaxSizes: any flag value gives bounds within (0,
// MaxMilliCPU] that parse again to themselves, or an error; never a
// panic, never both.
func FuzzParseMaxSizes(f *testing.F) {
	for _, s := range []string{"tenant=2", "*=8,tenant=2500m", "", ",", "=", "a=", "=1", "a=1,a=2", "*=0", "a=-1", "a=1e12",
		"a=9e2337203372", "a=1Ki", "a=0.0001", "A=1", " a = 1 , * = 2 ", "a=1,b=2,c=3,*=4", "a=9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMaxSizes(s)
		if err != nil {
			if m != (MaxSizes{}) {
				t.Fatalf("%q: bounds %q and an error %v", s, m, err)
			}
			return
		}
		if m.p == nil {
			if strings.TrimSpace(s) != "" {
				t.Fatalf("%q: no bound and no error", s)
			}
			return
		}
		check := func(milli int64) {
			if milli <= 0 || milli > MaxMilliCPU {
				t.Fatalf("%q: bound %dm accepted", s, milli)
			}
		}
		for _, milli := range m.p.byNamespace {
			check(milli)
		}
		if m.p.any != 0 {
			check(m.p.any)
		}
		again, err := ParseMaxSizes(m.String())
		if err != nil || again.String() != m.String() {
			t.Fatalf("%q: canonical form %q parses to %q, %v", s, m.String(), again.String(), err)
		}
	})
}
