package podsource

import (
	"testing"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// TestVouchedOnlyThePodsFile: the operator vouches for a pods file, whose
// sizes every command then believes as fix does; never for a live source
// or a Lister handed in.
func TestVouchedOnlyThePodsFile(t *testing.T) {
	if got, ok := Vouched(File); !ok || got != metadata.OperatorTrust(FileVouch) {
		t.Errorf("Vouched(file) = %+v, %v; want the operator's trust", got, ok)
	}
	for _, src := range []string{CRI, Kubernetes, None, Auto, "given", ""} {
		if got, ok := Vouched(src); ok || got != (metadata.Trust{}) {
			t.Errorf("Vouched(%q) = %+v, %v; want the live rules (not vouched)", src, got, ok)
		}
	}
}
