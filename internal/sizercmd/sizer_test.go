package sizercmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cgwarden-sizer takes the flags `cgwarden sizer` took (the Deployments'
// arguments and the lanes' are the same), and refuses what the sizer
// cannot run with before it touches the API.
func TestFlagsAndRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert-file", "a"}, "--tls-cert-file and --tls-private-key-file go together"},
		{[]string{"--cert-hosts", "h"}, "managed certificates need --namespace"},
		{[]string{"--namespace", "n", "--cert-hosts", "h", "--coalesce", "0s"}, "--coalesce and --crd-recheck must be above 0"},
		{[]string{"--namespace", "n", "--cert-hosts", "h", "--workers", "0"}, "--workers"},
		{[]string{"--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"sizer"}, "unknown command"},
		{[]string{"--pod-level", "maybe"}, `--pod-level "maybe": want auto, on or off`},
		{[]string{"--max-size", "tenant=2,tenant=3"}, `invalid argument "tenant=2,tenant=3" for "--max-size" flag: namespace tenant is bounded twice`},
		{[]string{"--max-size", "tenant=0"}, `for "--max-size" flag: entry "tenant=0": bound 0m: a size must be above 0`},
		{[]string{"--max-size", "tenant"}, `for "--max-size" flag: entry "tenant": want NAMESPACE=CPU`},
		{[]string{"--namespace", "n", "--cert-hosts", "h", "--leader-elect-lease-duration", "10s"},
			"--leader-elect-lease-duration (10s) must be longer than --leader-elect-renew-deadline (10s)"},
		{[]string{"--namespace", "n", "--cert-hosts", "h", "--leader-elect-retry-period", "9s"},
			"--leader-elect-renew-deadline (10s) must be longer than 1.2 × --leader-elect-retry-period (9s), 10.8s"},
		{[]string{"--namespace", "n", "--cert-hosts", "h", "--leader-elect-retry-period", "0s"}, "must be above 0"},
	} {
		t.Setenv("POD_NAMESPACE", "")
		var out bytes.Buffer
		cmd := NewCommand(&out, &out)
		cmd.SetArgs(tc.args)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	cmd := NewCommand(&bytes.Buffer{}, &bytes.Buffer{})
	for _, f := range []string{"listen", "kubeconfig", "tls-cert-file", "tls-private-key-file", "namespace", "ca-secret", "cert-hosts",
		"webhook-qps", "webhook-burst", "resize", "leader-elect", "leader-election-id", "coalesce", "max-delay", "min-step", "workers",
		"kube-api-qps", "kube-api-burst", "event-window", "crd-recheck", "log-level", "pod-level", "max-size",
		"leader-elect-lease-duration", "leader-elect-renew-deadline", "leader-elect-retry-period"} {
		if cmd.Flags().Lookup(f) == nil {
			t.Errorf("no --%s", f)
		}
	}
	// The leader election's timings default to kube-controller-manager's.
	for f, want := range map[string]string{"leader-elect-lease-duration": "15s", "leader-elect-renew-deadline": "10s", "leader-elect-retry-period": "2s"} {
		if got := cmd.Flags().Lookup(f).DefValue; got != want {
			t.Errorf("--%s defaults to %s, want %s", f, got, want)
		}
	}
	// The sizer never names its webhook configuration: nothing to set.
	if cmd.Flags().Lookup("webhook-config") != nil {
		t.Error("--webhook-config: the sizer no longer touches its webhook configuration")
	}
}

// cgwarden-sizer ca writes the Component (owner-only: it holds the CA's
// key) and will not replace a CA the API server may trust without
// --force.
func TestCAComponentWritten(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) error {
		cmd := NewCommand(&bytes.Buffer{}, &bytes.Buffer{})
		cmd.SetArgs(append([]string{"ca", "--out-dir", dir}, args...))
		return cmd.Execute()
	}
	if err := run(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"kustomization.yaml", "secret.yaml", "cabundle-patch.yaml"} {
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", n, fi, err)
		}
	}
	first, _ := os.ReadFile(filepath.Join(dir, "secret.yaml"))
	if err := run(); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("again without --force: %v", err)
	}
	if err := run("--force"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "secret.yaml")); bytes.Equal(first, again) {
		t.Error("--force kept the old CA")
	}
}
