package agent

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/realtest"
)

// The agent links none of client-go's typed clientset, informer factory,
// discovery client or whole scheme: each registers every built-in API
// group at package initialisation, which costs every process that links
// it about 10 MiB of RSS before it does anything (docs/benchmarks.md,
// "Peak RSS"). The agent's API clients are apiconn.Client's, with
// schemes of their own group only.
func TestAgentLinksNoWholeScheme(t *testing.T) {
	noWholeScheme(t, "the agent", "github.com/cgwarden/cgwarden/internal/agent")
}

// Nor does the cgwarden binary, whatever its subcommands: Go initialises
// every package a binary links, so a typed clientset linked for another
// subcommand costs the agent the same. The sizer, which needs the
// clientset, the informer factory and leader election, is its own binary
// (cmd/cgwarden-sizer).
func TestAgentBinaryLinksNoWholeScheme(t *testing.T) {
	noWholeScheme(t, "cmd/cgwarden", "github.com/cgwarden/cgwarden/cmd/cgwarden")
}

// noWholeScheme fails t if pkg depends on client-go's whole scheme, typed
// clientset, informer factory or discovery client.
func noWholeScheme(t *testing.T, what, pkg string) {
	t.Helper()
	// The go command is a host tool: skipped in the v2 guest, required in
	// CI; once found, a failing go list is a failure, not a skip.
	goBin := realtest.HostTool(t, "golang-go, or Go from go.dev", "go")
	out, err := exec.Command(goBin, "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch {
		case p == "k8s.io/client-go/kubernetes/scheme", p == "k8s.io/client-go/kubernetes",
			p == "k8s.io/client-go/informers", p == "k8s.io/client-go/discovery",
			strings.HasPrefix(p, "k8s.io/client-go/kubernetes/typed/"):
			t.Errorf("%s links %s", what, p)
		}
	}
}
