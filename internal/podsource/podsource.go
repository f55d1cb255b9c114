package podsource

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cgwarden/cgwarden/internal/metadata"
)

// Modes of --metadata.
const (
	Auto       = "auto"
	CRI        = "cri"
	Kubernetes = "kubernetes"
	File       = "file"
	None       = "none"
)

// Modes lists the accepted --metadata values.
var Modes = []string{Auto, CRI, Kubernetes, File, None}

// DefaultCRISockets are tried in order when no socket is given: containerd,
// k3s's embedded containerd, CRI-O.
var DefaultCRISockets = []string{
	"/run/containerd/containerd.sock",
	"/run/k3s/containerd/containerd.sock",
	"/var/run/crio/crio.sock",
}

// Config selects and configures a source.
type Config struct {
	Mode string
	// CRISocket is the runtime's socket; empty tries DefaultCRISockets.
	CRISocket string
	// HostRoot prefixes the default socket paths (the host's / mounted
	// elsewhere in a container).
	HostRoot   string
	Kubeconfig string
	// NodeName limits the Kubernetes source to this node's pods.
	NodeName string
	PodsFile string
	// SyncTimeout bounds the wait for the Kubernetes informer's first
	// list (30 s if 0).
	SyncTimeout time.Duration
	// AllLabels keeps every pod label, for a label selector (the CLI's
	// -l). Without it a source keeps only the labels cgwarden reads (the
	// VM labels): the agent holds its node's pods for as long as it runs,
	// and a tenant's labels must not grow its memory.
	AllLabels bool
	// WrapTransport, when set, wraps the Kubernetes client's transport
	// (apiconn.Reach.Wrap: the agent's log says once when the API server
	// goes away and once when it is back).
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// Open returns the configured source and its name ("none" when there is
// none). An explicitly chosen source that cannot be set up is returned as
// a Lister that reports why at every call, so the agent logs it and keeps
// serving by UID. Only a bad mode is an error.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (metadata.Lister, string, error) {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "podsource")
	switch cfg.Mode {
	case File:
		if cfg.PodsFile == "" {
			return nil, "", fmt.Errorf("--metadata file needs --pods FILE")
		}
		l, err := OpenFile(cfg.PodsFile)
		if err != nil {
			return nil, "", err
		}
		return l, File, nil
	case CRI:
		sock := cfg.CRISocket
		if sock == "" {
			sock = firstSocket(cfg.HostRoot)
		}
		if sock == "" {
			return failing{fmt.Errorf("no CRI socket found at %s", strings.Join(DefaultCRISockets, ", "))}, CRI, nil
		}
		return dialCRI(sock, cfg.AllLabels), CRI, nil
	case Kubernetes:
		k, err := OpenKubernetes(ctx, cfg, log)
		switch {
		case k != nil && err != nil:
			// Asked for explicitly: keep it, it answers once the API
			// server does.
			log.Warn("Kubernetes API not answering yet; serving pods by UID until it does", "err", err)
			return k, Kubernetes, nil
		case err != nil:
			return failing{err}, Kubernetes, nil
		}
		return k, Kubernetes, nil
	case None:
		return nil, None, nil
	case Auto, "":
		return openAuto(ctx, cfg, log)
	}
	return nil, "", fmt.Errorf("--metadata %q: want one of %s", cfg.Mode, strings.Join(Modes, ", "))
}

// Closer is what closes a lister Open returned (its informer, its
// connection to the runtime): nil when it holds nothing to close.
func Closer(l metadata.Lister) func() {
	switch c := l.(type) {
	case interface{ Close() error }:
		return func() { _ = c.Close() }
	case interface{ Close() }:
		return c.Close
	}
	return nil
}

func openAuto(ctx context.Context, cfg Config, log *slog.Logger) (metadata.Lister, string, error) {
	if cfg.PodsFile != "" {
		l, err := OpenFile(cfg.PodsFile)
		if err != nil {
			return nil, "", err
		}
		return l, File, nil
	}
	socks := []string{cfg.CRISocket}
	if cfg.CRISocket == "" {
		socks = nil
		for _, s := range DefaultCRISockets {
			socks = append(socks, filepath.Join(cfg.HostRoot, s))
		}
	}
	for _, s := range socks {
		if _, err := os.Stat(s); err != nil {
			continue
		}
		c := dialCRI(s, cfg.AllLabels)
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := c.Pods(pctx)
		cancel()
		if err == nil {
			log.Info("pod metadata from the CRI runtime", "socket", s)
			return c, CRI, nil
		}
		log.Info("CRI socket does not answer; trying the next source", "socket", s, "err", err)
		c.Close()
	}
	if cfg.Kubeconfig != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		k, err := OpenKubernetes(ctx, cfg, log)
		if err == nil {
			log.Info("pod metadata from the Kubernetes API", "node", cfg.NodeName)
			return k, Kubernetes, nil
		}
		if k != nil {
			k.Close()
		}
		log.Info("Kubernetes API not usable", "err", err)
	}
	log.Warn("no pod metadata source works; pods are served by UID and containers by ID")
	return nil, None, nil
}

func firstSocket(hostRoot string) string {
	for _, s := range DefaultCRISockets {
		p := filepath.Join(hostRoot, s)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// failing is a source that could not be set up.
type failing struct{ err error }

func (f failing) Pods(context.Context) ([]metadata.Pod, error) { return nil, f.err }

// FileSource serves a pods file, read again whenever it changes (its
// size or modification time), so an edited file is a new truth — sizes in
// annotations included. A file that stops reading keeps the last good
// pods and reports the error.
type FileSource struct {
	name string
	mu   sync.Mutex
	pods []metadata.Pod
	seen fileStamp
}

// fileStamp is what tells that a file changed.
type fileStamp struct {
	size int64
	mod  time.Time
}

// OpenFile reads a `kubectl get pods -A -o json` file.
func OpenFile(name string) (*FileSource, error) {
	f := &FileSource{name: name}
	if _, err := f.Pods(context.Background()); err != nil {
		return nil, err
	}
	return f, nil
}

// Pods implements metadata.Lister.
func (f *FileSource) Pods(context.Context) ([]metadata.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := os.Stat(f.name)
	if err != nil {
		return f.pods, err
	}
	stamp := fileStamp{st.Size(), st.ModTime()}
	if f.pods != nil && stamp == f.seen {
		return f.pods, nil
	}
	pods, err := metadata.ReadPodsFile(f.name)
	if err != nil {
		return f.pods, err
	}
	if pods == nil {
		pods = []metadata.Pod{}
	}
	f.pods, f.seen = pods, stamp
	return f.pods, nil
}
