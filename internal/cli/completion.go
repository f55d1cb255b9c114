package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/cliflag"
	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inspect"
	"github.com/cgwarden/cgwarden/internal/podsource"
	"github.com/cgwarden/cgwarden/internal/rules"
)

// addCompletions registers shell completions for the flag values that
// are words (-o, --fail-on, --log-level, --metadata, --only, --sort-by) and for the
// embedded snapshots of --snapshot example:NAME. Flags that take a file
// keep the shell's file completion.
func addCompletions(root *cobra.Command) {
	words := func(ws ...string) cobra.CompletionFunc {
		return cobra.FixedCompletions(ws, cobra.ShellCompDirectiveNoFileComp)
	}
	_ = root.RegisterFlagCompletionFunc("snapshot", completeSnapshot)
	_ = root.RegisterFlagCompletionFunc("log-level", words(cliflag.LogLevels...))
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if f := c.LocalNonPersistentFlags().Lookup("output"); f != nil && c.Name() != "snapshot" {
			formats := fixFormats
			switch c.Name() {
			case "inspect":
				formats = readFormats
			case "audit":
				formats = auditFormats
			}
			_ = c.RegisterFlagCompletionFunc("output", words(formats...))
		}
		if c.LocalNonPersistentFlags().Lookup("sort-by") != nil {
			_ = c.RegisterFlagCompletionFunc("sort-by", words(inspect.SortKeys...))
		}
		if c.LocalNonPersistentFlags().Lookup("fail-on") != nil {
			_ = c.RegisterFlagCompletionFunc("fail-on", words(string(audit.Error), string(audit.Warning), string(audit.Info)))
		}
		if c.LocalNonPersistentFlags().Lookup("metadata") != nil {
			_ = c.RegisterFlagCompletionFunc("metadata", words(podsource.Modes...))
		}
		if c.LocalNonPersistentFlags().Lookup("only") != nil {
			_ = c.RegisterFlagCompletionFunc("only", words(rules.MisplacedContainer))
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeSnapshot offers the embedded snapshots once the word being
// completed could start "example:"; otherwise the shell completes files.
func completeSnapshot(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if toComplete == "" || !(strings.HasPrefix(examples.Prefix, toComplete) || strings.HasPrefix(toComplete, examples.Prefix)) {
		return nil, cobra.ShellCompDirectiveDefault
	}
	var out []cobra.Completion
	for _, name := range examples.Names() {
		if full := examples.Prefix + name; strings.HasPrefix(full, toComplete) {
			out = append(out, full)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
