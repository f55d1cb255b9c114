package lab

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/cgwarden/cgwarden/internal/certs"
)

// TestPKI: every kubeconfig names the API server and the cluster CA and a
// client certificate the CA signed for the user and groups the API server
// will read from it; the API server's certificate serves its names and
// addresses and the kubelet's its node; the front-proxy client is signed
// by the front-proxy CA alone; sa.pub is sa.key's; keys are 0600; a
// second Write to the same directory is refused.
func TestPKI(t *testing.T) {
	p := PKI{Dir: t.TempDir(), Node: "node-a", Server: "https://127.0.0.1:6443"}
	now := time.Now()
	if err := p.Write(now); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(p.Dir, "pki")
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pool := func(name string) *x509.CertPool {
		cp := x509.NewCertPool()
		if !cp.AppendCertsFromPEM(read(name)) {
			t.Fatalf("%s: no certificate", name)
		}
		return cp
	}
	parse := func(name string) *x509.Certificate {
		b, _ := pem.Decode(read(name))
		if b == nil {
			t.Fatalf("%s: no PEM", name)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cas, fp := pool("ca.crt"), pool("front-proxy-ca.crt")
	clientOf := func(c *x509.Certificate, roots *x509.CertPool) error {
		_, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}

	want := map[string][2]string{
		"admin": {"cgwarden-admin", "system:masters"}, "controller-manager": {"system:kube-controller-manager", ""},
		"scheduler": {"system:kube-scheduler", ""}, "kubelet": {"system:node:node-a", "system:nodes"},
		"metrics-server": {"cgwarden-metrics-server", "system:masters"},
	}
	for _, user := range Clients {
		cfg, err := clientcmd.LoadFromFile(filepath.Join(p.Dir, user+".kubeconfig"))
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		if rc.Host != p.Server || rc.CAFile != filepath.Join(dir, "ca.crt") {
			t.Errorf("%s: server %s, CA %s", user, rc.Host, rc.CAFile)
		}
		c := parse(filepath.Base(rc.CertFile))
		if err := clientOf(c, cas); err != nil {
			t.Errorf("%s: not a client certificate of the cluster CA: %v", user, err)
		}
		org := ""
		if len(c.Subject.Organization) > 0 {
			org = c.Subject.Organization[0]
		}
		if w := want[user]; c.Subject.CommonName != w[0] || org != w[1] {
			t.Errorf("%s: CN %q O %q, want %q %q", user, c.Subject.CommonName, org, w[0], w[1])
		}
		if fi, err := os.Stat(rc.KeyFile); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: key %v %v, want mode 0600", user, fi.Mode(), err)
		}
	}
	for file, hosts := range map[string][]string{"apiserver": apiServerHosts, "kubelet-serving": {"node-a", "127.0.0.1"}} {
		pair := certs.Pair{Cert: read(file + ".crt"), Key: read(file + ".key")}
		if err := pair.Verify(read("ca.crt"), hosts, now); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
	if err := clientOf(parse("front-proxy-client.crt"), fp); err != nil {
		t.Errorf("front-proxy-client: %v", err)
	}
	if err := clientOf(parse("front-proxy-client.crt"), cas); err == nil {
		t.Error("front-proxy-client verifies against the cluster CA: the aggregation layer's trust is not separate")
	}
	kb, _ := pem.Decode(read("sa.key"))
	pb, _ := pem.Decode(read("sa.pub"))
	k, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.ParsePKIXPublicKey(pb.Bytes)
	if err != nil || !k.PublicKey.Equal(pub) {
		t.Errorf("sa.pub is not sa.key's public key (%v)", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "sa.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("sa.key: %v %v, want mode 0600", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if slices.Contains(names, "sa.crt") || !slices.Contains(names, "front-proxy-ca.crt") {
		t.Errorf("pki/: %v", names)
	}
	if err := p.Write(now); err == nil {
		t.Error("a second Write over an existing PKI succeeded")
	}
}

// TestGuestKit: the guest node's kubeconfig reaches the API server's port
// on the guest's own loopback, as system:node:<GuestNode> of the cluster
// CA, with nothing outside the kit named; its serving certificate (the
// CA after it, as the kubelet's own file is) verifies for GuestNode; the
// key is 0600.
func TestGuestKit(t *testing.T) {
	p := PKI{Dir: t.TempDir(), Node: "node-a", Server: "https://127.0.0.1:16443"}
	now := time.Now()
	if err := p.Write(now); err != nil {
		t.Fatal(err)
	}
	kit := GuestKit(p.Dir)
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(kit, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if got := strings.TrimSpace(string(read("node-name"))); got != GuestNode {
		t.Errorf("node-name %q, want %q", got, GuestNode)
	}
	cfg, err := clientcmd.Load(read("kubelet.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://127.0.0.1:16443" || rc.CAFile != "" || rc.CertFile != "" || rc.KeyFile != "" {
		t.Errorf("kubeconfig: server %s, files %q %q %q: want the guest's loopback at the API server's port, everything inline", rc.Host, rc.CAFile, rc.CertFile, rc.KeyFile)
	}
	b, _ := pem.Decode(rc.CertData)
	if b == nil {
		t.Fatal("kubeconfig: no client certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(read("ca.crt"))
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the kubelet's client certificate: %v", err)
	}
	if c.Subject.CommonName != "system:node:"+GuestNode || !slices.Equal(c.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("the kubelet's user: CN %q O %q", c.Subject.CommonName, c.Subject.Organization)
	}
	pair := certs.Pair{Cert: read("kubelet.crt"), Key: read("kubelet.key")}
	if err := pair.Verify(read("ca.crt"), []string{GuestNode}, now); err != nil {
		t.Errorf("the kubelet's serving certificate: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(kit, "kubelet.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubelet.key: %v %v, want mode 0600", fi.Mode(), err)
	}
}
