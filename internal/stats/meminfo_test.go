package stats

import "testing"

func TestParseMeminfo(t *testing.T) {
	good := "MemTotal:       24570284 kB\nMemFree:        20000000 kB\nMemAvailable:   22000000 kB\n"
	m, err := ParseMeminfo(good)
	if err != nil || m.TotalBytes != 24570284*1024 || m.FreeBytes != 20000000*1024 {
		t.Fatalf("got %+v, %v", m, err)
	}
	for _, bad := range []string{
		"",
		"MemTotal: 10 kB\n",
		"MemFree: 10 kB\n",
		"MemTotal: x kB\nMemFree: 1 kB\n",
		"MemTotal: 10 MB\nMemFree: 1 kB\n",
		"MemTotal: 10 kB\nMemFree: 11 kB\n",
		"MemTotal: 99999999999999999999 kB\nMemFree: 1 kB\n",
	} {
		if _, err := ParseMeminfo(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add("MemTotal:       24570284 kB\nMemFree:        20000000 kB\n")
	f.Add("MemFree: 1 kB\nMemTotal: 2 kB")
	f.Add("MemTotal: 1 kB\n")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMeminfo(s)
		if err == nil && m.FreeBytes > m.TotalBytes {
			t.Fatalf("free above total: %+v", m)
		}
	})
}
