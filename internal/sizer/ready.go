package sizer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Ready answers /readyz: ok while the sizer can answer admissions, that
// is while the certificate it serves is within its validity. The API
// server verifies it (the webhook's caBundle) and refuses an expired or
// not-yet-valid one, while the kubelet's probes do not verify it: a
// replica whose certificate lapsed still answers /healthz but fails every
// admission, and leaves the Service's endpoints through this.
type Ready struct {
	// Serving is the server's TLS configuration: its Certificates, or its
	// GetCertificate (certificate files re-read on each handshake).
	Serving *tls.Config
	Now     func() time.Time
}

func (r Ready) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if err := r.check(); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

func (r Ready) check() error {
	leaf, err := servingLeaf(r.Serving)
	if err != nil {
		return err
	}
	now := r.Now()
	if now.Before(leaf.NotBefore) {
		return fmt.Errorf("serving certificate valid only from %s", leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if now.After(leaf.NotAfter) {
		return fmt.Errorf("serving certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// servingLeaf is the certificate a handshake would present now.
func servingLeaf(tc *tls.Config) (*x509.Certificate, error) {
	var c *tls.Certificate
	switch {
	case tc == nil:
		return nil, errors.New("no TLS configuration")
	case tc.GetCertificate != nil:
		var err error
		if c, err = tc.GetCertificate(&tls.ClientHelloInfo{}); err != nil {
			return nil, fmt.Errorf("serving certificate: %w", err)
		}
	case len(tc.Certificates) > 0:
		c = &tc.Certificates[0]
	default:
		return nil, errors.New("no serving certificate")
	}
	if c == nil || len(c.Certificate) == 0 {
		return nil, errors.New("no serving certificate")
	}
	if c.Leaf != nil {
		return c.Leaf, nil
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return leaf, nil
}
