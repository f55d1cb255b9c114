package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// Output formats of inspect and audit (fix and revert take text and json).
var (
	readFormats = []string{"text", "wide", "json", "yaml"}
	fixFormats  = []string{"text", "json"}
)

// addOutput adds -o with the formats a command writes.
func addOutput(cmd *cobra.Command, o *Options, formats ...string) {
	if len(formats) == 0 {
		formats = fixFormats
	}
	cmd.Flags().StringVarP(&o.Output, "output", "o", "text", "output `FORMAT`: "+strings.Join(formats, ", "))
}

// checkOutput refuses an -o the command does not write.
func checkOutput(o *Options, formats []string) error {
	if o.Output == "" {
		o.Output = "text"
	}
	if !slices.Contains(formats, o.Output) {
		return fmt.Errorf("-o %s: want %s", o.Output, strings.Join(formats, ", "))
	}
	return nil
}

// writeData writes v as indented JSON, or as YAML (the same fields:
// sigs.k8s.io/yaml converts the JSON, as kubectl does).
func writeData(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// SelectFlags choose pods as kubectl does: -n/--namespace, -A, --pod
// and -l/--selector. Without -n every namespace is shown: a node's view.
type SelectFlags struct {
	Namespace     string
	AllNamespaces bool
	Pods          []string
	Selector      string
}

// addSelect adds the pod selection flags.
func addSelect(cmd *cobra.Command, o *Options) {
	f := cmd.Flags()
	f.StringVarP(&o.Select.Namespace, "namespace", "n", "", "only the pods of this `NAMESPACE` (default: all namespaces; a node's view)")
	f.BoolVarP(&o.Select.AllNamespaces, "all-namespaces", "A", false, "the pods of every namespace (the default; refuses -n)")
	f.StringSliceVar(&o.Select.Pods, "pod", nil, "only these pods, by `NAME` or UID (repeat or comma-separate)")
	f.StringVarP(&o.Select.Selector, "selector", "l", "", "only the pods whose labels match this `SELECTOR` (kubectl syntax: app=web,tier!=db); needs pod metadata")
}

// filter builds the pod filter of the selection flags.
func (o *Options) filter() (*metadata.Filter, error) {
	s := o.Select
	if s.AllNamespaces && s.Namespace != "" {
		return nil, fmt.Errorf("-A/--all-namespaces and -n/--namespace %s exclude each other", s.Namespace)
	}
	return metadata.NewFilter(s.Namespace, s.Pods, s.Selector)
}
