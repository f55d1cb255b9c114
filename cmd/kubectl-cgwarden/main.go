// Command kubectl-cgwarden is the kubectl plugin `kubectl cgwarden`: put it
// on PATH and run `kubectl cgwarden audit -A`. See docs/kubectl-plugin.md.
package main

import (
	"os"

	"github.com/cgwarden/cgwarden/internal/kubectlplugin"
)

func main() { os.Exit(kubectlplugin.Main(os.Args[1:], os.Stdout, os.Stderr)) }
