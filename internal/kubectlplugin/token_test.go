package kubectlplugin

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
)

// The token sent to the agent is the one the user's credentials put on
// requests to the API server; a client certificate gives none.
func TestBearerToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  rest.Config
		want string
	}{
		{"token", rest.Config{Host: "https://x", BearerToken: "abc.def.ghi"}, "abc.def.ghi"},
		{"token file", rest.Config{Host: "https://x", BearerTokenFile: file}, "from-a-file"},
		{"basic", rest.Config{Host: "https://x", Username: "u", Password: "p"}, ""},
		{"nothing", rest.Config{Host: "https://x"}, ""},
	} {
		got, err := bearerToken(&c.cfg)
		if err != nil || got != c.want {
			t.Errorf("%s: %q %v, want %q", c.name, got, err, c.want)
		}
	}
}
