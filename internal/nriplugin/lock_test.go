package nriplugin

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"

	"github.com/cgwarden/cgwarden/internal/poll"
)

// runPlugin runs a plugin named as the manifests name it on sock until
// the returned stop.
func runPlugin(t *testing.T, sock, lockDir string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	o := Options{Socket: sock, Handlers: []string{"spin"}, Name: "cgwarden", Index: "50", Retry: 100 * time.Millisecond, LockDir: lockDir}
	go func() { done <- Run(ctx, o, nil, slog.New(slog.DiscardHandler)) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// Two plugins of one name registered at once, as the old and the new pod
// of a DaemonSet update with maxSurge would register them: NRI's runtime
// side takes both and refuses the container both place ("plugins ... both
// tried to set"). What the plugin lock prevents.
func TestTwoPluginsOfOneNameConflict(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nri.sock")
	r := runtimeSide(t, sock)
	defer r.Stop()
	runPlugin(t, sock, "")
	runPlugin(t, sock, "")
	var conflict error
	poll.Every(50*time.Millisecond).Until(t, 10*time.Second, "two plugins of one name in conflict (if not, the runtime side changed, and the lock's reason with it)", func() (bool, string, error) {
		_, err := r.CreateContainer(context.Background(), &nri.CreateContainerRequest{Pod: pod("spin", slice), Container: ctr(literal)})
		conflict = err
		return err != nil && strings.Contains(err.Error(), "both tried to set"), fmt.Sprint(err), nil
	})
	t.Logf("without the lock: %v", conflict)
}

// With the lock (--lock-dir), the second plugin waits: every container is
// created while both run, placed by the first; once the first stops the
// second registers and places.
func TestSecondPluginWaitsForTheLock(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nri.sock")
	lockDir := t.TempDir()
	r := runtimeSide(t, sock)
	defer r.Stop()
	stopFirst := runPlugin(t, sock, lockDir)
	if got := waitPlaced(t, r, 10*time.Second); got != expanded {
		t.Fatalf("placed at %q, want %q", got, expanded)
	}
	runPlugin(t, sock, lockDir)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		if got := create(t, r, "spin"); got != expanded { // create fails the test on a conflict
			t.Fatalf("while both run: placed at %q, want %q by the first", got, expanded)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopFirst()
	start := time.Now()
	if got := waitPlaced(t, r, 10*time.Second); got != expanded {
		t.Fatalf("after the first stopped: placed at %q, want %q", got, expanded)
	}
	t.Logf("the second plugin placed a container %v after the first stopped", time.Since(start).Round(time.Millisecond))
}
