package demo

import "testing"

func TestParseCPUSeconds(t *testing.T) {
	for _, c := range []struct {
		text string
		v2   bool
		want float64
		err  bool
	}{
		{"1500000000\n", false, 1.5, false},
		{"usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n", true, 2.5, false},
		{"user_usec 1\n", true, 0, true},
		{"usage_usec x\n", true, 0, true},
		{"", false, 0, true},
		{"-1", false, 0, true},
	} {
		got, err := parseCPUSeconds(c.text, c.v2)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("parseCPUSeconds(%q, %v) = %v, %v; want %v, error %v", c.text, c.v2, got, err, c.want, c.err)
		}
	}
}

func TestParseProcCgroup(t *testing.T) {
	const s = "/cgwarden-demo-01234567"
	v1 := "12:pids:/cgwarden-demo-01234567/a\n4:cpu,cpuacct:/cgwarden-demo-01234567/kubepods/pod1/c1\n0::/\n"
	for _, c := range []struct {
		text string
		v2   bool
		want string
		err  bool
	}{
		{v1, false, "kubepods/pod1/c1", false},
		{"0::/cgwarden-demo-01234567/x:y\n", true, "x:y", false},
		{"0::/cgwarden-demo-01234567\n", true, "", false},
		{"0::/system.slice/other\n", true, "", true},
		{"0::/cgwarden-demo-012345678/x\n", true, "", true}, // a prefix is not the scratch
		{"12:pids:/a\n", false, "", true},
		{"", true, "", true},
	} {
		got, err := parseProcCgroup(c.text, c.v2, s)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("parseProcCgroup(%q, %v) = %q, %v; want %q, error %v", c.text, c.v2, got, err, c.want, c.err)
		}
	}
}
