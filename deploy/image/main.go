// Command image builds cgwarden's container image without a Docker daemon:
// the static binaries, built reproducibly from the checkout — /cgwarden
// (the node agent and CLI, the entrypoint) and /cgwarden-sizer (the
// cluster-wide sizer, which its Deployment runs by command:) — as the
// only files of a one-layer linux/amd64 OCI image, written as an OCI
// image-layout archive that `ctr images import` (and `docker load`,
// `podman load`, `skopeo copy oci-archive:…`) read.
//
// Reproducible: the binaries are built with -trimpath, without VCS stamping
// and with an empty build ID; the layer's entries have a fixed owner, mode and
// time (SOURCE_DATE_EPOCH, else 0), and so has the image config; two builds
// of the same checkout with the same Go give the same image digest, which
// the command prints.
//
//	go run . -repo ../.. -name ghcr.io/cgwarden/cgwarden:dev -o cgwarden.oci.tar
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	repo := flag.String("repo", "../..", "the cgwarden checkout to build")
	name := flag.String("name", "ghcr.io/cgwarden/cgwarden:dev", "image name")
	out := flag.String("o", "cgwarden.oci.tar", "archive to write")
	version := flag.String("version", "dev", "version label of the image")
	tags := flag.String("tags", "", "build tags of the binary (tests only: \"failpoints\" makes an image no release may ship)")
	flag.Parse()
	digest, err := build(*repo, *name, *out, *version, *tags)
	if err != nil {
		log.Fatalf("image: %v", err)
	}
	fmt.Printf("%s %s %s\n", *out, *name, digest)
}

// epoch is the time stamped on everything: SOURCE_DATE_EPOCH, else 0.
func epoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

func build(repo, name, out, version, tags string) (string, error) {
	when, err := epoch()
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp("", "cgwarden-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	for _, bin := range binaries {
		body, err := goBuild(repo, tmp, bin, tags)
		if err != nil {
			return "", err
		}
		if err := tw.WriteHeader(&tar.Header{Name: bin, Mode: 0o755, Size: int64(len(body)), ModTime: when, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return "", err
		}
		if _, err := tw.Write(body); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	raw := layerTar.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return "", err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return "", err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: when}
	for i := range cf.History {
		cf.History[i].Created = v1.Time{Time: when}
	}
	cf.Config.Entrypoint = []string{"/cgwarden"}
	cf.Config.Cmd = []string{"serve"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "cgwarden",
		"org.opencontainers.image.version": version,
		"org.opencontainers.image.source":  "https://github.com/cgwarden/cgwarden",
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return "", err
	}
	if img, err = mutate.CreatedAt(img, v1.Time{Time: when}); err != nil {
		return "", err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(tmp, "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", err
	}
	tag := name[strings.LastIndex(name, ":")+1:]
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          name,
		"org.opencontainers.image.ref.name": tag,
	}), layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"})); err != nil {
		return "", err
	}
	if err := tarDir(dir, out, when); err != nil {
		return "", err
	}
	return digest.String(), nil
}

// binaries are the image's files, each built from ./cmd/<name> and put at
// /<name>, in this order.
var binaries = [...]string{"cgwarden", "cgwarden-sizer"}

// goBuild builds ./cmd/name of the checkout at repo into dir, statically
// and reproducibly, and returns the binary.
func goBuild(repo, dir, name, tags string) ([]byte, error) {
	bin := filepath.Join(dir, name)
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid="}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, "-o", bin, "./cmd/"+name)...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building %s: %w", name, err)
	}
	return os.ReadFile(bin)
}

// tarDir writes the OCI layout under dir as a tar, entries in a fixed
// order with fixed owners and times.
func tarDir(dir, out string, when time.Time) error {
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: when, Format: tar.FormatPAX}
		if info.IsDir() {
			h.Typeflag, h.Mode, h.Name = tar.TypeDir, 0o755, h.Name+"/"
			return tw.WriteHeader(h)
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, info.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out + ".tmp")
		return err
	}
	return os.Rename(out+".tmp", out)
}
