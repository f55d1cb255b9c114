package main

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Two builds of the same checkout give the same image, byte for byte, and
// the image holds the two binaries (cgwarden, its entrypoint, and
// cgwarden-sizer, which the sizer's Deployment runs) and nothing else.
func TestReproducibleOneFileImage(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	da, err := build("../..", "cgwarden.local/cgwarden:test", a, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	db, err := build("../..", "cgwarden.local/cgwarden:test", b, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	ra, _ := os.ReadFile(a)
	rb, _ := os.ReadFile(b)
	if da != db || string(ra) != string(rb) {
		t.Fatalf("two builds differ: %s / %s", da, db)
	}
	// Unpack the layout and look into the image's one layer.
	lay := filepath.Join(dir, "layout")
	untar(t, a, lay)
	p, err := layout.FromPath(lay)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 || m.Manifests[0].Annotations["io.containerd.image.name"] != "cgwarden.local/cgwarden:test" {
		t.Fatalf("index: %+v, %v", m, err)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/cgwarden" {
		t.Fatalf("config: %+v, %v", cf, err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Mode != 0o755 || h.Size < 1<<20 {
			t.Errorf("%s: mode %o, %d bytes", h.Name, h.Mode, h.Size)
		}
	}
	if strings.Join(names, " ") != "cgwarden cgwarden-sizer" {
		t.Errorf("layer holds %v, want only cgwarden and cgwarden-sizer", names)
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
