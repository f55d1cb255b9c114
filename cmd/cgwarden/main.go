// Command cgwarden keeps the cgroups of Kubernetes pods honest. See the
// README and `cgwarden --help`.
package main

import (
	"os"

	"github.com/cgwarden/cgwarden/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
