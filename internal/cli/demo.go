package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/demo"
	"github.com/cgwarden/cgwarden/internal/report"
)

func newDemo(o *Options) *cobra.Command {
	var seed, htmlFile, driver string
	duration := Duration(5 * time.Second)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show both bugs and the fix on this machine's kernel: VM pods split by size, and a misplaced container put back",
		Long: "demo builds seed 000 (VM pods of 1, 2 and 4 CPUs in a BestEffort tier at the minimum weight, beside a Burstable pod) " +
			"and seed 003 (a container cgroup outside its pod) in a scratch cgroup of its own, with real CPU burners, measures what " +
			"each pod gets, audits, applies the fix, measures again, reverts and removes everything it created (also on Ctrl-C). " +
			"It needs root and writes nothing outside its scratch cgroup.",
		Example: `  sudo cgwarden demo
  sudo cgwarden demo --seed 000 --duration 10s
  sudo cgwarden demo --driver systemd
  sudo cgwarden demo -o json --html demo.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd, o, demoFlags{seed: seed, driver: driver, htmlFile: htmlFile, duration: time.Duration(duration)})
		},
	}
	addOutput(cmd, o)
	cmd.Flags().StringVar(&seed, "seed", "all", "the layout to show: 000 (VM pods' weights), 003 (a container outside its pod) or all")
	cmd.Flags().Var(&duration, "duration", "how long each phase measures")
	cmd.Flags().StringVar(&driver, "driver", demo.DriverCgroupfs, "name the kubelet's cgroups as this cgroup driver does: cgroupfs or systemd")
	cmd.Flags().StringVar(&htmlFile, "html", "", "also write the run as a self-contained HTML report to `FILE`")
	return cmd
}

// demoFlags are demo's flags.
type demoFlags struct {
	seed, driver, htmlFile string
	duration               time.Duration
}

// runDemo runs the demo until it ends or is interrupted, then writes the
// result.
func runDemo(cmd *cobra.Command, o *Options, f demoFlags) error {
	seeds, err := demo.ParseSeeds(f.seed)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	if o.Output != "text" && o.Output != "json" && o.Output != "" {
		return &ExitError{Code: 2, Err: fmt.Errorf("-o %s: want text or json", o.Output)}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := demo.Run(ctx, demo.Options{Seeds: seeds, Driver: f.driver, Duration: f.duration,
		Progress: cmd.ErrOrStderr(), Live: isTerminal(cmd.ErrOrStderr())})
	if res != nil {
		if werr := writeDemo(cmd, o, res, f.htmlFile); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

func writeDemo(cmd *cobra.Command, o *Options, res *demo.Result, htmlFile string) error {
	var err error
	if o.Output == "json" {
		err = writeData(cmd.OutOrStdout(), "json", res)
	} else {
		err = res.WriteText(cmd.OutOrStdout())
	}
	if err != nil || htmlFile == "" {
		return err
	}
	return writeFileWith(htmlFile, func(f *os.File) error { return report.Write(f, report.FromDemo(res)) })
}

// newDemoChild is the hidden command the demo's processes run.
func newDemoChild() *cobra.Command {
	return &cobra.Command{
		Use:    demo.ChildCommand,
		Hidden: true,
		Args:   cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return demo.ChildMain(args, os.Stdin)
		},
	}
}

// writeFileWith creates file, lets write fill it, and closes it,
// reporting the first error.
func writeFileWith(file string, write func(*os.File) error) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", file, err)
	}
	return f.Close()
}
