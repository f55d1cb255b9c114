package agent

import (
	"strings"
	"testing"
	"time"
)

// --nri-metrics names the plugin's loopback listener and nothing else:
// the agent relays it, and is no proxy to another host.
func TestOptionsNRIMetricsLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{"": true, "127.0.0.1:9532": true, "0.0.0.0:9532": false, "10.1.2.3:9532": false, "127.0.0.1": false} {
		o := Options{Listen: "127.0.0.1:9530", Interval: time.Second, NRIMetrics: addr}
		err := o.Validate()
		if (err == nil) != ok {
			t.Errorf("--nri-metrics %q: %v, want ok=%v", addr, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--nri-metrics") {
			t.Errorf("--nri-metrics %q: the error %q does not name the flag", addr, err)
		}
	}
}

// --listen-ip takes the place of --listen's host, IPv6 included, and
// refuses what is not an address; the result still needs --allow-remote
// beyond loopback.
func TestOptionsListenIP(t *testing.T) {
	for _, c := range []struct {
		ip, want string
		remote   bool
		err      string
	}{
		{"", "0.0.0.0:9530", true, ""},
		{"10.1.2.3", "10.1.2.3:9530", true, ""},
		{"fd00::7", "[fd00::7]:9530", true, ""},
		{"127.0.0.2", "127.0.0.2:9530", false, ""},
		{"10.1.2.3", "", false, "--allow-remote"},
		{"node-1", "", true, "--listen-ip"},
		{"fe80::1%eth0", "", true, "--listen-ip"},
		{"10.1.2.3:9530", "", true, "--listen-ip"},
	} {
		o := Options{Listen: "0.0.0.0:9530", ListenIP: c.ip, AllowRemote: c.remote, Interval: time.Second}
		cfg, err := o.Config()
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("--listen-ip %q: %v, want an error naming %s", c.ip, err, c.err)
			}
		case err != nil:
			t.Errorf("--listen-ip %q: %v", c.ip, err)
		case cfg.Listen != c.want:
			t.Errorf("--listen-ip %q: listens on %q, want %q", c.ip, cfg.Listen, c.want)
		}
	}
}

// --max-size is parsed once, in Config, by the size policy's parser
// (vmsize.ParseMaxSizes, the sizer's too), and its errors name the flag
// and the entry.
func TestOptionsMaxSize(t *testing.T) {
	for _, c := range []struct{ in, bounds, err string }{
		{"", "", ""},
		{"tenant=2,*=8", "*=8,tenant=2", ""},
		{"tenant=2,tenant=4", "", "--max-size: namespace tenant is bounded twice"},
		{"tenant=0", "", `--max-size: entry "tenant=0": bound 0m: a size must be above 0`},
		{"tenant=-2", "", `--max-size: entry "tenant=-2": CPU quantity "-2" is negative`},
		{"tenant=100000", "", "above 8192 CPUs"},
		{"tenant", "", `--max-size: entry "tenant": want NAMESPACE=CPU`},
		{"tenant=2,", "", "--max-size: entry 2 is empty"},
	} {
		o := Options{Listen: "127.0.0.1:9530", Interval: time.Second, MaxSize: c.in}
		cfg, err := o.Config()
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("--max-size %q: %v, want an error saying %q", c.in, err, c.err)
			}
			if verr := o.Validate(); verr == nil {
				t.Errorf("--max-size %q: Validate accepts it", c.in)
			}
		case err != nil:
			t.Errorf("--max-size %q: %v", c.in, err)
		case cfg.MaxSizes.String() != c.bounds:
			t.Errorf("--max-size %q: bounds %q, want %q", c.in, cfg.MaxSizes.String(), c.bounds)
		}
	}
}
