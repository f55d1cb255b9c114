package examples_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/examples"
	"github.com/cgwarden/cgwarden/internal/inventory"
	"github.com/cgwarden/cgwarden/internal/metadata"
	"github.com/cgwarden/cgwarden/internal/snapshot"
)

// Every embedded snapshot loads, says where it came from, scans without
// read errors into a kubelet tree, and carries CPU rates; its pods file,
// when there is one, names every pod and every non-sandbox container the
// scan finds.
func TestEmbedded(t *testing.T) {
	names := examples.Names()
	for _, want := range []string{"cgroupfs-v1-containerd", "cgroupfs-v2-crio", "seed-003-k3s-spin"} {
		if !slices.Contains(names, want) {
			t.Errorf("no embedded %s (have %v)", want, names)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			raw, ok := examples.Open(name)
			if !ok {
				t.Fatal("cannot open")
			}
			s, err := snapshot.Load(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(s.Notes, func(n string) bool { return strings.HasPrefix(n, "origin:") }) {
				t.Errorf("no \"# origin:\" note")
			}
			if len(s.Samples) != 2 {
				t.Fatalf("%d samples, want 2 (for rates)", len(s.Samples))
			}
			var meta *metadata.Set
			podsFile := filepath.Join("snapshots", name+".pods.json")
			if f, err := os.Open(podsFile); err == nil {
				pods, err := metadata.ParsePods(f)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				meta = metadata.NewSet(pods)
			}
			n, err := (&inventory.Sampling{Meta: meta}).TakeAll(s.Samples)
			if err != nil {
				t.Fatal(err)
			}
			if len(n.Errors) != 0 {
				t.Errorf("read errors: %v", n.Errors)
			}
			if n.KubeRoot == nil || len(n.Pods) == 0 {
				t.Fatalf("no kubelet tree or no pods")
			}
			rated := 0
			n.Root.Walk(func(c *inventory.Cgroup) {
				if c.UsageCores != nil && *c.UsageCores > 0 {
					rated++
				}
			})
			if rated == 0 {
				t.Error("no cgroup has a CPU rate")
			}
			if meta == nil {
				return
			}
			for _, p := range n.Pods {
				if p.Name == "" || p.Namespace == "" {
					t.Errorf("pod %s has no name in %s", p.UID, podsFile)
				}
				// kubectl does not list a pod's sandbox (pause) container:
				// at most one nameless container per pod.
				nameless := 0
				for _, c := range p.Containers {
					if c.Name == "" {
						nameless++
					}
				}
				if nameless > 1 {
					t.Errorf("pod %s/%s: %d containers without a name", p.Namespace, p.Name, nameless)
				}
			}
			// Every container the pods file lists is found in the scan.
			for _, mp := range meta.Pods() {
				p := n.Pod(mp.UID)
				if p == nil {
					t.Errorf("pod %s/%s of the pods file is not on the node", mp.Namespace, mp.Name)
					continue
				}
				for _, mc := range mp.Containers {
					if !slices.ContainsFunc(p.Containers, func(c *inventory.Container) bool { return c.ID == mc.ID && c.Name == mc.Name }) {
						t.Errorf("pod %s/%s: container %s (%s) not found", mp.Namespace, mp.Name, mc.Name, mc.ID)
					}
				}
			}
		})
	}
}
