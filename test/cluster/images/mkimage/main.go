// Command mkimage packs a root filesystem directory into a one-layer
// linux/amd64 image and writes it as an OCI image-layout archive (a tar of
// oci-layout, index.json and blobs/) that `ctr images import` reads. The
// index entry carries the image's name twice: containerd's own
// io.containerd.image.name and the OCI org.opencontainers.image.ref.name.
//
//	mkimage -rootfs DIR -name cgwarden.local/busybox:1 -o busybox.tar [-entrypoint /pause] [-cmd sh]
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	rootfs := flag.String("rootfs", "", "directory whose tree becomes the image's only layer")
	name := flag.String("name", "", "image name, e.g. cgwarden.local/busybox:1")
	out := flag.String("o", "", "archive to write")
	entrypoint := flag.String("entrypoint", "", "entrypoint (space-separated)")
	cmd := flag.String("cmd", "", "default command (space-separated)")
	flag.Parse()
	if *rootfs == "" || *name == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*rootfs, *name, *out, *entrypoint, *cmd); err != nil {
		log.Fatalf("mkimage: %v", err)
	}
}

func run(rootfs, name, out, entrypoint, cmd string) error {
	layerTar, err := tarTree(rootfs)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	// OCI media types throughout (go-containerregistry's empty image is a
	// Docker schema 2 one).
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if entrypoint != "" {
		cf.Config.Entrypoint = strings.Fields(entrypoint)
	}
	if cmd != "" {
		cf.Config.Cmd = strings.Fields(cmd)
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "mkimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	tag := name[strings.LastIndex(name, ":")+1:]
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          name,
		"org.opencontainers.image.ref.name": tag,
	}), layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"})); err != nil {
		return err
	}
	archive, err := tarTree(dir)
	if err != nil {
		return err
	}
	return os.WriteFile(out, archive, 0o644)
}

// tarTree returns a tar of the tree under root (paths relative to it,
// owned by root, symlinks kept as links).
func tarTree(root string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "root", "root"
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(tw, f); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
