package realtest

import (
	"bufio"
	"io"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// servingAddr is how `cgwarden serve --listen 127.0.0.1:0` says where it
// listens (its first log line).
var servingAddr = regexp.MustCompile(`msg=serving addr=(127\.0\.0\.1:\d+)`)

// StartServe starts cmd, a `cgwarden serve --listen 127.0.0.1:0 …`, and
// returns the loopback address it listens on, from its log; the process is
// killed at cleanup. Its stderr is drained (lines before the address go to
// t.Log).
func StartServe(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingAddr.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
			t.Log(sc.Text())
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case a := <-found:
		return a
	case <-time.After(60 * time.Second):
		t.Fatalf("%s never said where it listens", cmd)
	}
	return ""
}
