package cli

import (
	"strings"
	"testing"
)

// Bad flags are refused before anything connects, with exit code 2 and a
// message naming the flag.
func TestNRIRefusesBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nri", "--runtime-handlers", "Not_A_Label"}, "--runtime-handlers"},
		{[]string{"nri", "--runtime-handlers", "spin", "--socket", "relative.sock"}, "--socket"},
		{[]string{"nri", "--learned-file", ""}, "no runtime handler"},
		{[]string{"nri", "--runtime-handlers", "spin", "--plugin-index", "x"}, "--plugin-index"},
	} {
		_, stderr, code := run(c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("cgwarden %s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}
