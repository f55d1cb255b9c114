package metadata

import "testing"

func TestFilter(t *testing.T) {
	meta := NewSet([]Pod{
		{UID: "u1", Name: "web-1", Namespace: "default", Labels: map[string]string{"app": "web", "tier": "front"}},
		{UID: "u2", Name: "db-0", Namespace: "db", Labels: map[string]string{"app": "db"}},
	})
	pods := []struct{ uid, ns, name string }{{"u1", "default", "web-1"}, {"u2", "db", "db-0"}, {"u3", "", ""}}
	for _, c := range []struct {
		ns, sel string
		names   []string
		want    string // the UIDs selected
	}{
		{want: "u1u2u3"},
		{ns: "db", want: "u2"},
		{names: []string{"web-1", "u3"}, want: "u1u3"},
		{sel: "app=web", want: "u1"},
		{sel: "app in (web,db),tier!=front", want: "u2"},
		{sel: "!app", want: "u3"}, // a pod without metadata has no labels
		{ns: "default", sel: "app=db", want: ""},
	} {
		f, err := NewFilter(c.ns, c.names, c.sel)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, p := range pods {
			if f.Match(p.uid, p.ns, p.name, meta) {
				got += p.uid
			}
		}
		if got != c.want {
			t.Errorf("-n %q --pod %v -l %q: %q, want %q", c.ns, c.names, c.sel, got, c.want)
		}
	}
	if _, err := NewFilter("", nil, "a in (b"); err == nil {
		t.Error("a bad selector is accepted")
	}
	var none *Filter
	if none.Active() || !none.Match("x", "", "", nil) {
		t.Error("a nil filter selects something less than every pod")
	}
}
