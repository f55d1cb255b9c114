//go:build !failpoints

package failpoint

// Enabled reports whether this build holds failpoints (go test -tags
// failpoints); it does not.
const Enabled = false

// Hit is a failpoint; in this build it does nothing and reports false.
func Hit(string) bool { return false }
