package realtest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// LockCPU serializes the tests that measure how the scheduler splits a
// CPU among burners: `go test ./...` runs packages in parallel, and two
// such tests pinning burners to the same CPU would each measure the
// other's load along with their own (deep, low-weight cgroups are then
// served in coarse slices, and a split drifts from the weights). The lock
// is a flock on a file in the temporary directory, released at the end of
// the test.
func LockCPU(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "cgwarden-test-cpu.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("CPU lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("CPU lock: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}
