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
