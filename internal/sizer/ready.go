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
// is while the certificate it serves is within its validity and, with
// managed certificates, signed by the CA of its Secret. The API server
// verifies it (the webhook's caBundle, set to that CA at install) and
// refuses an expired, not-yet-valid or foreign one, while the kubelet's
// probes do not verify it: a replica whose certificate lapsed still
// answers /healthz but fails every admission, and leaves the Service's
// endpoints through this. The CA is the Secret's, not read from the
// webhook configuration: the sizer holds no permission on that.
type Ready struct {
	// Serving is the server's TLS configuration: its Certificates, or its
	// GetCertificate (certificate files re-read on each handshake).
	Serving *tls.Config
	// CA, if set, is the PEM CA the served certificate must chain to
	// (Serving.CA: the Secret's ca.crt).
	CA  func() []byte
	Now func() time.Time
}

func (r Ready) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if err := r.check(); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

func (r Ready) check() error {
	c, leaf, err := servingLeaf(r.Serving)
	if err != nil {
		return err
	}
	now := r.Now()
	if r.CA != nil {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(r.CA()) {
			return errors.New("no CA from the Secret")
		}
		inter := x509.NewCertPool()
		for _, der := range c.Certificate[1:] {
			if ic, err := x509.ParseCertificate(der); err == nil {
				inter.AddCert(ic)
			}
		}
		// At the certificate's own start: its validity is said below.
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: leaf.NotBefore}); err != nil {
			return fmt.Errorf("serving certificate not signed by the CA in the Secret: %w", err)
		}
	}
	if now.Before(leaf.NotBefore) {
		return fmt.Errorf("serving certificate valid only from %s", leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if now.After(leaf.NotAfter) {
		return fmt.Errorf("serving certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// servingLeaf is the certificate a handshake would present now, and its
// leaf.
func servingLeaf(tc *tls.Config) (*tls.Certificate, *x509.Certificate, error) {
	var c *tls.Certificate
	switch {
	case tc == nil:
		return nil, nil, errors.New("no TLS configuration")
	case tc.GetCertificate != nil:
		var err error
		if c, err = tc.GetCertificate(&tls.ClientHelloInfo{}); err != nil {
			return nil, nil, fmt.Errorf("serving certificate: %w", err)
		}
	case len(tc.Certificates) > 0:
		c = &tc.Certificates[0]
	default:
		return nil, nil, errors.New("no serving certificate")
	}
	if c == nil || len(c.Certificate) == 0 {
		return nil, nil, errors.New("no serving certificate")
	}
	if c.Leaf != nil {
		return c, c.Leaf, nil
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("serving certificate: %w", err)
	}
	return c, leaf, nil
}
