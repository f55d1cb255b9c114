package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cgwarden/cgwarden/internal/buildinfo"
	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// A host with cgroups and no kubepods hierarchy (a laptop, or --host-root
// pointing at the wrong place).
const noKubepods = `cgwarden snapshot v1
taken: 2024-08-21T17:28:32Z
-- /proc/self/mountinfo --
35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
-- /sys/devices/system/cpu/online --
0-3
-- /sys/fs/cgroup/system.slice/cpu.weight --
100
-- /sys/fs/cgroup/user.slice/cpu.weight --
100
`

// audit where no kubepods hierarchy was found used to say "No findings."
// and exit 0; it is exit 2 with the reason unless --allow-no-kubepods.
func TestAuditWithoutKubepods(t *testing.T) {
	sealed, err := snapshot.Reseal([]byte(noKubepods))
	if err != nil {
		t.Fatal(err)
	}
	file := writeTemp(t, "laptop.snapshot", string(sealed))
	out, errs, code := run("audit", "--snapshot", file)
	if code != 2 || out != "" || !strings.Contains(errs, "no kubepods hierarchy found in snapshot "+file) || !strings.Contains(errs, "--allow-no-kubepods") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if _, errs, code := run("audit", "--snapshot", file, "--allow-no-kubepods"); code != 0 {
		t.Errorf("--allow-no-kubepods: exit %d: %s", code, errs)
	}
}

func TestLogLevel(t *testing.T) {
	for _, lvl := range []string{"debug", "info", "warn", "error", "WARN"} {
		if _, errs, code := run("--log-level", lvl, "inspect", "--snapshot", "example:seed-003-k3s-spin"); code != 0 {
			t.Errorf("--log-level %s: exit %d: %s", lvl, code, errs)
		}
	}
	for _, lvl := range []string{"verbose", "", "info+4", "-4"} {
		_, errs, code := run("--log-level", lvl, "inspect", "--snapshot", "example:seed-003-k3s-spin")
		if code != 2 || !strings.Contains(errs, "--log-level") {
			t.Errorf("--log-level %q: exit %d, %q; want exit 2 and an error", lvl, code, errs)
		}
	}
}

// --interval means nothing with --snapshot (the snapshot's samples set
// the interval): say so instead of ignoring it without a word.
func TestIntervalWithSnapshotWarns(t *testing.T) {
	for _, cmd := range []string{"inspect", "audit"} {
		_, errs, _ := run(cmd, "--snapshot", "example:seed-003-k3s-spin", "--interval", "10s")
		if !strings.Contains(errs, "warning: --interval 10s is ignored with --snapshot") {
			t.Errorf("%s: stderr %q", cmd, errs)
		}
		if _, errs, _ := run(cmd, "--snapshot", "example:seed-003-k3s-spin"); strings.Contains(errs, "--interval") {
			t.Errorf("%s without --interval warns: %q", cmd, errs)
		}
	}
}

func TestVersion(t *testing.T) {
	in := buildinfo.Get()
	out, _, code := run("--version")
	if code != 0 || out != "cgwarden "+in.String()+"\n" {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	out, _, code = run("version")
	if code != 0 || !strings.Contains(out, "version: "+in.Version+"\n") || !strings.Contains(out, "go:      "+in.GoVersion+"\n") || !strings.Contains(out, "commit:  ") {
		t.Errorf("version: exit %d, %q", code, out)
	}
	out, _, code = run("version", "-o", "json")
	var got buildinfo.Info
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got != in {
		t.Errorf("version -o json: exit %d, %v, %+v", code, err, got)
	}
}

func TestExamplesCommand(t *testing.T) {
	out, errs, code := run("examples")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, name := range examples.Names() {
		if !strings.Contains(out, "example:"+name+"\n    ") {
			t.Errorf("%s is not listed with its origin:\n%s", name, out)
		}
	}
}

// Every command has examples, and no flag's help lost a word to cobra's
// placeholder rule (the first back-quoted word of a usage becomes the
// value's name: --vms once read "--vms kubectl get virtualmachines...").
func TestHelp(t *testing.T) {
	root := NewRoot(nil, nil)
	placeholder := regexp.MustCompile(`^[A-Z][A-Z_]*$`)
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.Hidden && c.Example == "" && c.Name() != "help" && c.Name() != "__complete" && c.Name() != "__completeNoDesc" && c.Parent() != nil && c.Parent().Name() != "completion" && c.Name() != "completion" {
			t.Errorf("%s has no Examples section", c.CommandPath())
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			name, usage := pflag.UnquoteUsage(f)
			if strings.Contains(f.Usage, "`") && !placeholder.MatchString(name) {
				t.Errorf("%s --%s: placeholder %q; usage %q", c.CommandPath(), f.Name, name, usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	out, _, _ := run("audit", "--help")
	if !strings.Contains(out, "--vms FILE") || !strings.Contains(out, "Examples:") {
		t.Errorf("audit --help:\n%s", out)
	}
}

// complete asks cobra's hidden completion command what it would offer.
func complete(t *testing.T, args ...string) []string {
	t.Helper()
	out, errs, code := run(append([]string{"__complete"}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %v: exit %d: %s", args, code, errs)
	}
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if l == "" || strings.HasPrefix(l, ":") {
			continue
		}
		got = append(got, strings.SplitN(l, "\t", 2)[0])
	}
	return got
}

func TestCompletions(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "-o", ""}, "text json yaml"},
		{[]string{"inspect", "--output", "j"}, "text wide json yaml"}, // the shell filters by prefix
		{[]string{"fix", "-o", ""}, "text json"},
		{[]string{"inspect", "--sort-by", ""}, "name cpu memory guaranteed weight"},
		{[]string{"inspect", "--metadata", ""}, "auto cri kubernetes file none"},
		{[]string{"audit", "--fail-on", ""}, "error warning info"},
		{[]string{"--log-level", ""}, "debug info warn error"},
		{[]string{"inspect", "--snapshot", "example:seed-0"}, "example:seed-000-eks-neonvm example:seed-003-k3s-spin"},
		{[]string{"audit", "--snapshot", "ex"}, "example:" + strings.Join(examples.Names(), " example:")},
		{[]string{"serve", "--metadata", ""}, "auto cri kubernetes file none"},
	} {
		if got := strings.Join(complete(t, c.args...), " "); got != c.want {
			t.Errorf("%v: %q, want %q", c.args, got, c.want)
		}
	}
}
