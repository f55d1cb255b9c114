package demo

import (
	"fmt"
	"os"
	"testing"
)

// TestMain lets the test binary be the demo's children too: Run
// re-executes its own binary (here the test binary) with ChildCommand.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ChildCommand {
		if err := ChildMain(os.Args[2:], os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
