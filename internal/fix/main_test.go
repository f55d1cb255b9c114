package fix

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"testing"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
)

// Roles the test binary plays when re-executed by a test (set through the
// environment, read only here, in the test binary's main).
const (
	envRole = "CGWARDEN_FIX_TEST_ROLE"
	// roleMemUser allocates and touches memUserBytes, then sleeps.
	roleMemUser = "memuser"
	// roleApply runs an apply against a scratch tree and stops, forever,
	// at the stage named by envStop, after printing "stopped": the parent
	// kills it there with SIGKILL.
	roleApply  = "apply"
	envScratch = "CGWARDEN_FIX_TEST_SCRATCH"
	envPoints  = "CGWARDEN_FIX_TEST_POINTS"
	envJournal = "CGWARDEN_FIX_TEST_JOURNAL"
	envStop    = "CGWARDEN_FIX_TEST_STOP" // "<stage>:<op index>"

	memUserBytes = 64 << 20
)

func TestMain(m *testing.M) {
	switch os.Getenv(envRole) {
	case roleMemUser:
		memUser()
	case roleApply:
		os.Exit(applyChild())
	case roleRun:
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

func memUser() {
	b := make([]byte, memUserBytes)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	for {
		time.Sleep(time.Hour)
		runtime.KeepAlive(b)
	}
}

// applyChild applies the plan for the scratch tree and blocks at the
// requested stage, so that the parent test can SIGKILL it there.
func applyChild() int {
	host, err := cgroupfs.OpenHost("/")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	host.AllowWrites(strings.Split(os.Getenv(envPoints), ":")...)
	stage, idx, _ := strings.Cut(os.Getenv(envStop), ":")
	stopAt, _ := strconv.Atoi(idx)
	out := bufio.NewWriter(os.Stdout)
	e := &Engine{FS: host, Base: os.Getenv(envScratch), JournalDir: os.Getenv(envJournal), Meta: seedMeta(),
		Hook: func(s Stage, op, _ int) {
			if string(s) == stage && op == stopAt {
				fmt.Fprintln(out, "stopped")
				out.Flush()
				for {
					time.Sleep(time.Hour)
				}
			}
		}}
	if _, err := e.Apply(Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintln(out, "finished without stopping")
	out.Flush()
	return 0
}
