package cli

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// LoadMeta reads --pods and, when given, --vms, whose VM sizes are tied to
// the pods by their labels. nil when neither was given.
func LoadMeta(o *Options) (*metadata.Set, error) {
	meta, err := LoadPods(o.PodsFile)
	if err != nil {
		return nil, err
	}
	if o.VMsFile == "" {
		return meta, nil
	}
	if meta == nil {
		return nil, fmt.Errorf("--vms needs --pods: a VM's size is tied to its pod by the pod's labels")
	}
	f, err := os.Open(o.VMsFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	vms, err := metadata.ParseVMs(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.VMsFile, err)
	}
	for _, vm := range meta.ApplyVMs(vms) {
		slog.Debug("VM without a pod in the pods file", "vm", vm.Namespace+"/"+vm.Name, "kind", vm.Kind)
	}
	return meta, nil
}

func addVMs(cmdFlags interface {
	StringVar(*string, string, string, string)
}, o *Options) {
	cmdFlags.StringVar(&o.VMsFile, "vms", "", "VM sizes: a `FILE` holding the output of kubectl get virtualmachines.vm.neon.tech -A -o json and/or kubectl get vmis -A -o json (needs --pods)")
}
