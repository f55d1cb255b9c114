package podsource

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

const podsJSON = `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod",
"metadata":{"name":"spin-test","namespace":"default","uid":"99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"},
"spec":{"containers":[{"name":"spin-test"}]},
"status":{"containerStatuses":[{"name":"spin-test","containerID":"containerd://c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00","ready":true,"restartCount":0,"image":"","imageID":"","state":{"running":{"startedAt":"2024-08-21T17:22:33Z"}}}]}}]}`

func TestFileSourceInAutoAndFileModes(t *testing.T) {
	f := filepath.Join(t.TempDir(), "pods.json")
	if err := os.WriteFile(f, []byte(podsJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{Auto, File} {
		l, name, err := Open(context.Background(), Config{Mode: mode, PodsFile: f, CRISocket: "/nonexistent.sock"}, nil)
		if err != nil || name != File {
			t.Fatalf("%s: %q %v", mode, name, err)
		}
		pods, err := l.Pods(context.Background())
		if err != nil || len(pods) != 1 || pods[0].Containers[0].ID != spinCtr || pods[0].Containers[0].StartTime.IsZero() {
			t.Errorf("%s: %+v %v", mode, pods, err)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"kind":"Node"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(context.Background(), Config{Mode: File, PodsFile: bad}, nil); err == nil {
		t.Error("a file that is no pod list was accepted")
	}
}
