package sizercmd

import (
	"bytes"
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
	for _, f := range []string{"listen", "kubeconfig", "tls-cert-file", "tls-private-key-file", "namespace", "cert-secret", "cert-hosts",
		"webhook-config", "resize", "leader-elect", "leader-election-id", "coalesce", "max-delay", "min-step", "workers",
		"kube-api-qps", "kube-api-burst", "event-window", "crd-recheck", "log-level"} {
		if cmd.Flags().Lookup(f) == nil {
			t.Errorf("no --%s", f)
		}
	}
}
