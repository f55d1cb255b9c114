package agent

import (
	"os/exec"
	"strings"
	"testing"
)

// The agent links none of client-go's typed clientset, informer factory,
// discovery client or whole scheme: each registers every built-in API
// group at package initialisation, which costs every process that links
// it about 10 MiB of RSS before it does anything (docs/benchmarks.md,
// "Peak RSS"). The agent's API clients are apiconn.Client's, with
// schemes of their own group only. (The cgwarden binary still links them
// through the sizer: see docs/benchmarks.md.)
func TestAgentLinksNoWholeScheme(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/cgwarden/cgwarden/internal/agent").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch {
		case p == "k8s.io/client-go/kubernetes/scheme", p == "k8s.io/client-go/kubernetes",
			p == "k8s.io/client-go/informers", p == "k8s.io/client-go/discovery",
			strings.HasPrefix(p, "k8s.io/client-go/kubernetes/typed/"):
			t.Errorf("the agent links %s", p)
		}
	}
}
