package hold

import (
	"context"
	"log/slog"
	"time"

	"github.com/cgwarden/cgwarden/internal/fix"
	"github.com/cgwarden/cgwarden/internal/plan"
)

// RunAdoption repairs misplaced containers every interval with fix's own
// plan and engine (each run journaled, `cgwarden revert` undoes it), until
// ctx ends; onApply (may be nil) is told of each run that changed something. The engine is its own: the Holder's engine is not shared, as
// Engine.Meta changes with every round.
func RunAdoption(ctx context.Context, e *fix.Engine, sizes Sizes, every time.Duration, log *slog.Logger, onApply func(*fix.Result)) {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "adopt")
	defer e.Close()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		meta, err := sizes(ctx)
		if err != nil {
			log.Warn("pod metadata", "err", err)
		}
		e.Meta = meta
		res, err := e.Apply(fix.Options{Only: []string{plan.RuleMisplaced}})
		switch {
		case err != nil:
			log.Error("adopting misplaced containers", "err", err)
		case res.Run != "":
			moved := 0
			for _, s := range res.Steps {
				moved += len(s.Moved)
			}
			log.Info("adopted misplaced containers", "run", res.Run, "operations", len(res.Steps), "processes", moved)
			if onApply != nil {
				onApply(res)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
