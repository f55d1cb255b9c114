package scale

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cgwarden/cgwarden/internal/certs"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// sizerBinary builds ../../cmd/cgwarden-sizer, the sizer's own binary,
// once per test binary.
func sizerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cgwarden-scale-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "cgwarden-sizer")
		cmd := exec.Command("go", "build", "-o", builtBin, "./cmd/cgwarden-sizer")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building cgwarden-sizer: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// sizerProc is cgwarden-sizer running as ServiceAccount
// cgwarden-sizer/cgwarden-sizer (deploy/kustomize/sizer), resize
// controller on, no leader election, with its own serving certificate.
type sizerProc struct {
	metricsURL string
	qps        float64
}

// startSizer starts the sizer with args added to its flags, and stops it
// at the end of the test.
func (e *env) startSizer(t *testing.T, qps float64, args ...string) *sizerProc {
	t.Helper()
	return e.startSizerVia(t, "", nil, qps, args...)
}

// startSizerVia is startSizer with the sizer's API server at server, whose
// certificate ca signs: a proxy in front of the lane's (empty: the lane's
// itself).
func (e *env) startSizerVia(t *testing.T, server string, ca []byte, qps float64, args ...string) *sizerProc {
	t.Helper()
	t0 := time.Now()
	dir := t.TempDir()
	rc := e.serviceAccountConfig(t, sizerNamespace, sizerSA)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["scale"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthority: rc.CAFile, CertificateAuthorityData: rc.CAData}
	if server != "" {
		kc.Clusters["scale"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	}
	kc.AuthInfos["sizer"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken}
	kc.Contexts["scale"] = &clientcmdapi.Context{Cluster: "scale", AuthInfo: "sizer"}
	kc.CurrentContext = "scale"
	kubeconfig := filepath.Join(dir, "sizer.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	pair, err := certs.SelfSigned("cgwarden-sizer", []string{"127.0.0.1"}, time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pair.Cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pair.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	logPath := filepath.Join(dir, "sizer.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	flags := append([]string{"--kubeconfig", kubeconfig, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--tls-cert-file", certFile, "--tls-private-key-file", keyFile, "--leader-elect=false",
		"--kube-api-qps", fmt.Sprint(qps), "--kube-api-burst", fmt.Sprint(int(2 * qps))}, args...)
	cmd := exec.Command(sizerBinary(t), flags...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("sizer log (tail):\n%s", b)
		}
	})
	s := &sizerProc{metricsURL: fmt.Sprintf("https://127.0.0.1:%d/metrics", port), qps: qps}
	poll(t, 60*time.Second, "the sizer's resize controller running", func() (bool, string, error) {
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			return false, "", fmt.Errorf("the sizer exited:\n%s", b)
		default:
		}
		m, err := httpsMetrics(context.Background(), s.metricsURL)
		if err != nil {
			return false, "", err
		}
		// The controller's series appear once its informers synced and a
		// worker took the first key, or at once: the queue gauge is set
		// from the first Get; the resize counter exists from the start.
		_, ok := m["cgwarden_sizer_resizes_total"]
		return ok, "no cgwarden_sizer_resizes_total yet", nil
	})
	t.Logf("sizer serving in %v", time.Since(t0).Round(time.Millisecond))
	return s
}

func (s *sizerProc) metrics(t *testing.T) scrape {
	t.Helper()
	m, err := httpsMetrics(context.Background(), s.metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestMain removes the cgwarden-sizer binary built.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		_ = os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}
