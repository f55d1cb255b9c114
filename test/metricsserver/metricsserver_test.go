package metricsserver

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/metrics-server/pkg/scraper/client"
	"sigs.k8s.io/metrics-server/pkg/scraper/client/resource"
)

const (
	nodeName = "k3s-node"
	seedCtr  = "c339025b3f0d9bec908636b49764fbca659636f54ad45c2eddd281049eb4df00"
)

// startCgwarden builds cgwarden from the parent module and serves args on
// a free loopback port, returning the port.
func startCgwarden(t *testing.T, args ...string) int {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cgwarden")
	build := exec.Command("go", "build", "-o", bin, "./cmd/cgwarden")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building cgwarden: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--node-name", nodeName}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// cgwarden logs the address it listens on once it serves.
	addr := regexp.MustCompile(`msg=serving addr=127\.0\.0\.1:(\d+)`)
	found := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Log(sc.Text())
			if m := addr.FindStringSubmatch(sc.Text()); m != nil {
				p, _ := strconv.Atoi(m[1])
				found <- p
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case p := <-found:
		return p
	case <-time.After(60 * time.Second):
		t.Fatal("cgwarden serve never said where it listens")
	}
	return 0
}

func scrape(t *testing.T, port int) (nodeCPU, nodeMem uint64, pods map[apitypes.NamespacedName]map[string][2]uint64) {
	t.Helper()
	// What metrics-server builds from --kubelet-port=<port>
	// --deprecated-kubelet-completely-insecure (plain HTTP).
	return scrapeWith(t, &client.KubeletClientConfig{
		Client:              rest.Config{Timeout: 10 * time.Second},
		AddressTypePriority: []corev1.NodeAddressType{corev1.NodeInternalIP},
		Scheme:              "http",
		DefaultPort:         port,
	})
}

func scrapeWith(t *testing.T, cfg *client.KubeletClientConfig) (nodeCPU, nodeMem uint64, pods map[apitypes.NamespacedName]map[string][2]uint64) {
	t.Helper()
	kc, err := resource.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	node.Name = nodeName
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	batch, err := kc.GetMetrics(ctx, node)
	if err != nil {
		t.Fatalf("metrics-server's kubelet client: %v", err)
	}
	n, ok := batch.Nodes[nodeName]
	if !ok {
		t.Fatalf("metrics-server dropped the node (it does when CPU or memory is missing or 0): %+v", batch)
	}
	pods = map[apitypes.NamespacedName]map[string][2]uint64{}
	for ref, p := range batch.Pods {
		pods[ref] = map[string][2]uint64{}
		for name, c := range p.Containers {
			pods[ref][name] = [2]uint64{c.CumulativeCPUUsed, c.MemoryUsage}
		}
	}
	return n.CumulativeCPUUsed, n.MemoryUsage, pods
}

// The seed 003 pod, named from a pods file, as metrics-server sees it:
// the node and the Spin container with non-zero CPU and memory, read from
// the misplaced cgroup the kubelet would not have found.
func TestMetricsServerReadsSeed003(t *testing.T) {
	port := startCgwarden(t, "--snapshot", "example:seed-003-k3s-spin", "--pods", "testdata/seed-003-pods.json")
	cpu, mem, pods := scrape(t, port)
	if cpu != 9001e9 || mem == 0 {
		t.Errorf("node: cpu %d ns, memory %d bytes", cpu, mem)
	}
	spin, ok := pods[apitypes.NamespacedName{Namespace: "default", Name: "spin-test-66d9dd45f5-csf5j"}]
	if !ok {
		t.Fatalf("the seed pod is missing: %v", pods)
	}
	c, ok := spin["spin-test"]
	if !ok {
		t.Fatalf("container spin-test missing: %v", spin)
	}
	// cpu.stat usage_usec 26392435 in the second sample; working set
	// memory.current 27000000 − inactive_file 1903808.
	if c[0] != 26392435000 || c[1] != 25096192 {
		t.Errorf("spin-test: cpu %d ns, memory %d bytes; want 26392435000 and 25096192", c[0], c[1])
	}
}

// Without metadata, pods are served by UID: metrics-server still decodes
// them (it would match no API pod, but nothing breaks).
func TestMetricsServerReadsUnnamedPods(t *testing.T) {
	port := startCgwarden(t, "--snapshot", "example:seed-003-k3s-spin")
	_, _, pods := scrape(t, port)
	p, ok := pods[apitypes.NamespacedName{Name: "pod99afd520-5b3e-4c8d-8471-4b6c8ee26b4c"}]
	if !ok {
		t.Fatalf("unnamed seed pod missing: %v", pods)
	}
	if c := p[seedCtr]; c[0] == 0 || c[1] == 0 {
		t.Errorf("container by ID: %v", c)
	}
}

// The usual way: cgwarden serves HTTPS and metrics-server runs with
// --kubelet-port=<port> --kubelet-insecure-tls (or a CA for the
// certificate), with its service account token sent along as to a kubelet.
func TestMetricsServerOverTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeSelfSigned(t, certFile, keyFile)
	port := startCgwarden(t, "--snapshot", "example:seed-003-k3s-spin", "--pods", "testdata/seed-003-pods.json",
		"--tls-cert-file", certFile, "--tls-private-key-file", keyFile)
	_, mem, pods := scrapeWith(t, &client.KubeletClientConfig{
		Client: rest.Config{
			Timeout:         10 * time.Second,
			BearerToken:     "metrics-server-token",
			TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		},
		AddressTypePriority: []corev1.NodeAddressType{corev1.NodeInternalIP},
		Scheme:              "https",
		DefaultPort:         port,
	})
	c := pods[apitypes.NamespacedName{Namespace: "default", Name: "spin-test-66d9dd45f5-csf5j"}]["spin-test"]
	if mem == 0 || c[0] != 26392435000 || c[1] != 25096192 {
		t.Errorf("over TLS: node memory %d, spin-test %v", mem, c)
	}
}

func writeSelfSigned(t *testing.T, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: nodeName},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
}
