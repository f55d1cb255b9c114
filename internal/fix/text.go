package fix

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/cgwarden/cgwarden/internal/plan"
)

// The text and JSON forms of fix's and revert's results, as the CLI
// prints them.

// WriteDryRun writes a plan that was not applied (text, or "json") and,
// in text, how to make it so. fromSnapshot says the plan was made from a
// snapshot, which --apply refuses: the changes are made on the node the
// snapshot came from.
func WriteDryRun(w io.Writer, format string, p *plan.Plan, fromSnapshot bool) error {
	if format == "json" {
		return writeJSON(w, p)
	}
	if err := plan.WriteText(w, p); err != nil {
		return err
	}
	var err error
	switch {
	case len(p.Ops) == 0:
	case fromSnapshot:
		_, err = fmt.Fprintln(w, "This was a dry run from a snapshot: nothing was changed. To make these changes, run `cgwarden fix --apply` on the node the snapshot was taken from (it plans again from the node's state then); `cgwarden revert` undoes them.")
	default:
		_, err = fmt.Fprintln(w, "This was a dry run: nothing was changed. Run with --apply to make these changes; `cgwarden revert` undoes them.")
	}
	return err
}

// WriteResult writes what an apply did (text, or "json").
func WriteResult(w io.Writer, format string, res *Result) error {
	if format == "json" {
		return writeJSON(w, res)
	}
	if err := plan.WriteText(w, res.Plan); err != nil {
		return err
	}
	if res.Run == "" {
		return nil
	}
	verb := "Applied"
	if res.Resumed {
		verb = "Continued the cut-off run and applied"
	}
	fmt.Fprintf(w, "%s %d of %d operations (journal run %s).\n", verb, len(res.Steps), len(res.Plan.Ops), res.Run)
	for _, s := range res.Steps {
		if s.Note != "" && s.Op.Optional {
			fmt.Fprintf(w, "  %s: %s\n", s.Op.Path, s.Note)
		}
		if s.Op.Kind == plan.Move {
			fmt.Fprintf(w, "  moved processes %v", s.Moved)
			if len(s.Exited) > 0 {
				fmt.Fprintf(w, " (%v exited before they could be moved)", s.Exited)
			}
			fmt.Fprintln(w)
		}
	}
	_, err := fmt.Fprintln(w, "`cgwarden revert` undoes this run.")
	return err
}

// WriteRevert writes what a revert undid and what it could not (text, or
// "json").
func WriteRevert(w io.Writer, format string, rep *RevertReport) error {
	if format == "json" {
		return writeJSON(w, rep)
	}
	if len(rep.Runs) == 0 {
		_, err := fmt.Fprintln(w, "Nothing to revert.")
		return err
	}
	fmt.Fprintf(w, "Reverted run(s) %v, newest change first:\n", rep.Runs)
	for _, u := range rep.Undos {
		what := u.Op.Path
		if u.Op.Kind == plan.Move && len(u.Op.Pairs) > 0 {
			what = "processes back into " + u.Op.Pairs[0].Source
			if len(u.MovedBack) > 0 {
				what += fmt.Sprintf(" (%v)", u.MovedBack)
			}
		}
		fmt.Fprintf(w, "  %-16s %-5s %s", u.Status, u.Op.Kind, what)
		if u.Note != "" {
			fmt.Fprintf(w, ": %s", u.Note)
		}
		fmt.Fprintln(w)
	}
	_, err := fmt.Fprintf(w, "%d change(s) could not be undone.\n", len(rep.Failed()))
	return err
}

func writeJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}
