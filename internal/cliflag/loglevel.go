package cliflag

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// LogLevels are the --log-level values.
var LogLevels = []string{"debug", "info", "warn", "error"}

// ParseLogLevel reads --log-level; anything else is an error, not
// silently info.
func ParseLogLevel(s string) (slog.Level, error) {
	var lvl slog.Level
	if !slices.Contains(LogLevels, strings.ToLower(s)) || lvl.UnmarshalText([]byte(s)) != nil {
		return 0, fmt.Errorf("--log-level %q: want %s", s, strings.Join(LogLevels, ", "))
	}
	return lvl, nil
}
