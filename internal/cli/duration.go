package cli

import (
	"time"

	"github.com/cgwarden/cgwarden/internal/cliflag"
)

const defaultInterval = time.Second

// Duration is a flag value that refuses negative and absurd intervals
// (shared with cgwarden-sizer: cliflag).
type Duration = cliflag.Duration
