package serve_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/cli"
)

// The test binary doubles as two helper programs, so tests need nothing
// installed: with CGWARDEN_MEMORY_USER=<MiB> it allocates and touches that
// much anonymous memory and sleeps (the live tests' "memory user"); with
// CGWARDEN_RUN_CLI=1 it is cgwarden itself (the load test's server).
func TestMain(m *testing.M) {
	if mib := os.Getenv("CGWARDEN_MEMORY_USER"); mib != "" {
		holdMemory(mib)
	}
	if os.Getenv("CGWARDEN_RUN_CLI") == "1" {
		os.Exit(cli.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

var held []byte

func holdMemory(mib string) {
	n, err := strconv.Atoi(mib)
	if err != nil || n <= 0 || n > 1024 {
		fmt.Fprintln(os.Stderr, "CGWARDEN_MEMORY_USER: want MiB between 1 and 1024")
		os.Exit(2)
	}
	held = make([]byte, n<<20)
	for i := 0; i < len(held); i += 4096 {
		held[i] = 1
	}
	for {
		time.Sleep(time.Hour)
	}
}
