package fix

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/journal"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// roleRun runs one apply or revert against a scratch tree, as the agent's
// adopter, its weight holder, `fix --apply` or `revert --all` would, and
// exits: the fault suite's restartable agent (failpoints, when the test
// binary is built with them, are armed by CGWARDEN_FAILPOINTS in its
// environment).
const (
	roleRun = "run"
	// envMode is fix (adoption and weights), adopt (serve --fix's
	// adoption loop), weights (the weight holder's plan) or revert
	// (revert --all).
	envMode = "CGWARDEN_FIX_TEST_MODE"
	// envMeta names a JSON file of []metadata.Pod.
	envMeta = "CGWARDEN_FIX_TEST_META"

	// Exit codes of roleRun besides 0 and the failpoints' (SIGKILL, 2 for
	// a panic).
	exitFailed = 1
	exitLocked = 3
	exitSetup  = 4

	// faultMaxTier caps the tier's counted sizes far above what the
	// suite's pods declare.
	faultMaxTier = 64000
)

func runChild() int {
	host, err := cgroupfs.OpenHost("/")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitSetup
	}
	host.AllowWrites(strings.Split(os.Getenv(envPoints), ":")...)
	raw, err := os.ReadFile(os.Getenv(envMeta))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitSetup
	}
	var pods []metadata.Pod
	if err := json.Unmarshal(raw, &pods); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return exitSetup
	}
	e := &Engine{FS: host, Base: os.Getenv(envScratch), JournalDir: os.Getenv(envJournal), Meta: metadata.NewSet(pods)}
	defer e.Close()
	o := Options{MaxTierMilliCPU: faultMaxTier}
	switch mode := os.Getenv(envMode); mode {
	case "fix":
	case "adopt":
		o.Only = []string{rules.MisplacedContainer}
	case "weights":
		o.Only = []string{rules.SizeBlindWeights, rules.BestEffortStarvation}
	case "revert":
		rep, err := e.Revert(true)
		if err == nil && len(rep.Failed()) > 0 {
			err = fmt.Errorf("revert could not undo %+v", rep.Failed())
		}
		return exitFor(err)
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", mode)
		return exitSetup
	}
	_, err = e.Apply(o)
	return exitFor(err)
}

func exitFor(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, journal.ErrLocked):
		fmt.Fprintln(os.Stderr, err)
		return exitLocked
	}
	fmt.Fprintln(os.Stderr, err)
	return exitFailed
}
