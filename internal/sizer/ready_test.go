package sizer

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/certs"
)

// get asks a real HTTPS server serving r with its own TLS configuration
// for /readyz, as the kubelet's probe does (without verifying).
func get(t *testing.T, r Ready) (int, string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(r)
	srv.TLS = r.Serving
	srv.StartTLS()
	defer srv.Close()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// /readyz is ok while the served certificate is valid and 503, saying
// why, before or after its validity, with managed certificates and with
// certificate files.
func TestReadyFollowsTheServingCertificate(t *testing.T) {
	made := time.Now()
	hosts := []string{"cgwarden-sizer.cgwarden-sizer.svc"}
	ca, err := certs.NewCA("test-ca", made, caLifetime)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.Sign(hosts[0], hosts, made, leafLifetime)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(c.Cert, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	managed := &tls.Config{Certificates: []tls.Certificate{pair}}

	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, b := range map[string][]byte{certFile: c.Cert, keyFile: c.Key} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		return &c, err
	}}

	for name, tc := range map[string]*tls.Config{"managed": managed, "files": files} {
		for _, w := range []struct {
			at     time.Time
			status int
			says   string
		}{
			{made.Add(time.Hour), http.StatusOK, "ok"},
			{made.Add(leafLifetime + time.Hour), http.StatusServiceUnavailable, "expired"},
			{made.Add(-48 * time.Hour), http.StatusServiceUnavailable, "valid only from"},
		} {
			at := w.at
			status, body := get(t, Ready{Serving: tc, Now: func() time.Time { return at }})
			if status != w.status || !strings.Contains(body, w.says) {
				t.Errorf("%s at %s: %d %q, want %d saying %q", name, at.Sub(made), status, body, w.status, w.says)
			}
		}
	}

	// Certificate files replaced by something unreadable: not ready.
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (Ready{Serving: files, Now: time.Now}).check(); err == nil {
		t.Error("unreadable certificate files: ready")
	}
	if err := (Ready{Serving: &tls.Config{}, Now: time.Now}).check(); err == nil {
		t.Error("no certificate: ready")
	}

	// Managed certificates: ready only while what is served chains to
	// the CA of the Secret (the webhook's caBundle since install), not
	// to another.
	other, _ := certs.NewCA("other-ca", made, caLifetime)
	for _, w := range []struct {
		ca   []byte
		want bool
	}{{ca.PEM, true}, {other.PEM, false}} {
		err := (Ready{Serving: managed, CA: func() []byte { return w.ca }, Now: time.Now}).check()
		if (err == nil) != w.want {
			t.Errorf("against the CA %q: %v, want ready %v", w.ca[:40], err, w.want)
		}
	}
}
