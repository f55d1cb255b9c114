package sizer

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cgwarden/cgwarden/internal/certs"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Keys of the CA Secret (cgwarden-sizer-ca). It holds the CA's own key
// pair, as cert-manager's CA issuer keeps one (a kubernetes.io/tls Secret
// whose tls.crt is the CA): made once at install (NewCASecret, through
// `cgwarden-sizer ca` or the Helm chart's genCA), with the webhook's
// caBundle set to its ca.crt by the same install. The sizer only reads it
// and signs its serving certificates with it, in memory: it never writes
// the Secret nor its webhook configuration, so it needs no permission on
// either beyond get of this one Secret.
const (
	// SecretCA is the certificate clients trust: the webhook's caBundle.
	SecretCA = "ca.crt"
	// SecretCert and SecretKey are the CA's certificate and private key
	// (the same certificate as SecretCA for a self-signed CA; an
	// intermediate beneath it when cert-manager issued it from another).
	SecretCert = corev1.TLSCertKey
	SecretKey  = corev1.TLSPrivateKeyKey
)

// caLifetime is how long a CA made at install lasts: long, since
// replacing it means changing the webhook configuration, which the sizer
// is not allowed to do. Serving certificates are short and renewed by the
// sizer alone: each replica signs its own at start and again when less
// than leafRenewBefore is left (never past the CA's own end).
const (
	caLifetime       = 10 * 365 * 24 * time.Hour
	leafLifetime     = 90 * 24 * time.Hour
	leafRenewBefore  = 30 * 24 * time.Hour
	CAReloadInterval = time.Minute
)

// NewCASecret makes a new CA, valid from now, and the Secret
// namespace/name that keeps it. It is an install step
// (`cgwarden-sizer ca`), not something the sizer does.
func NewCASecret(namespace, name string, now time.Time) (*corev1.Secret, error) {
	ca, err := certs.NewCA("cgwarden-sizer-ca", now, caLifetime)
	if err != nil {
		return nil, err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
			"app.kubernetes.io/name": "cgwarden-sizer", "app.kubernetes.io/part-of": "cgwarden",
		}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{SecretCA: ca.PEM, SecretCert: ca.PEM, SecretKey: key},
	}, nil
}

// caOf is the CA kept in Secret s, and the certificate clients trust
// (ca.crt; tls.crt when there is none).
func caOf(s *corev1.Secret) (*certs.CA, []byte, error) {
	ca, err := certs.LoadCA(s.Data[SecretCert], s.Data[SecretKey])
	if err != nil {
		return nil, nil, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	anchor := s.Data[SecretCA]
	if len(anchor) == 0 {
		anchor = s.Data[SecretCert]
	}
	return ca, anchor, nil
}

// Serving is the sizer's serving certificate, signed by the CA in its
// Secret: loaded at start (Load), served through GetCertificate, and
// renewed by Run when the Secret's CA changes (a CA replaced at install,
// or renewed by cert-manager) or the certificate nears its end.
type Serving struct {
	Client          kubernetes.Interface
	Namespace, Name string
	// Hosts are the DNS names and IPs the certificate is for.
	Hosts []string
	Now   func() time.Time
	Log   *slog.Logger

	mu sync.Mutex
	// caKey identifies the CA the current certificate was signed with
	// (the Secret's tls.crt and ca.crt).
	caKey  []byte
	anchor []byte
	leaf   *tls.Certificate
}

// Load reads the Secret and signs a serving certificate when there is
// none yet, the CA changed, or the current one has less than
// leafRenewBefore left. It reports whether it signed one.
func (s *Serving) Load(ctx context.Context) (bool, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("CA secret %s/%s (made at install: cgwarden-sizer ca, or the Helm chart; docs/sizing.md): %w", s.Namespace, s.Name, err)
	}
	now := s.Now()
	caKey := append(append([]byte{}, sec.Data[SecretCert]...), sec.Data[SecretCA]...)
	s.mu.Lock()
	current := s.leaf != nil && bytes.Equal(caKey, s.caKey) && s.leaf.Leaf.NotAfter.After(now.Add(leafRenewBefore))
	s.mu.Unlock()
	if current {
		return false, nil
	}
	ca, anchor, err := caOf(sec)
	if err != nil {
		return false, err
	}
	life := min(leafLifetime, ca.NotAfter().Sub(now))
	if life <= 0 {
		return false, fmt.Errorf("secret %s/%s: the CA expired at %s: make a new one (docs/sizing.md)", s.Namespace, s.Name, ca.NotAfter().UTC().Format(time.RFC3339))
	}
	name := "cgwarden-sizer"
	if len(s.Hosts) > 0 {
		name = s.Hosts[0]
	}
	p, err := ca.Sign(name, s.Hosts, now, life)
	if err != nil {
		return false, err
	}
	if err := p.Verify(anchor, s.Hosts, now); err != nil {
		// ca.crt is not what signed tls.crt: the API server would refuse
		// the certificate, so the old one (if any) stays.
		return false, fmt.Errorf("secret %s/%s: a certificate signed by its tls.crt is not trusted by its ca.crt: %w", s.Namespace, s.Name, err)
	}
	pair, err := p.TLS()
	if err != nil {
		return false, err
	}
	if !bytes.Equal(sec.Data[SecretCert], anchor) {
		// An intermediate: served after the certificate it signed.
		pair.Certificate = append(pair.Certificate, pemBlocks(sec.Data[SecretCert])...)
	}
	if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
		return false, fmt.Errorf("serving certificate: %w", err)
	}
	s.mu.Lock()
	s.caKey, s.anchor, s.leaf = caKey, anchor, &pair
	s.mu.Unlock()
	return true, nil
}

// pemBlocks are the DER certificates of a PEM bundle.
func pemBlocks(b []byte) [][]byte {
	var out [][]byte
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		if blk.Type == "CERTIFICATE" {
			out = append(out, blk.Bytes)
		}
	}
}

// Run reloads the Secret every interval until ctx ends. A failed reload
// keeps the current certificate (logged): it stays valid for weeks.
func (s *Serving) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		made, err := s.Load(ctx)
		switch {
		case err != nil:
			s.Log.Error("serving certificate not renewed; the current one is kept", "err", err)
		case made:
			s.Log.Info("serving certificate signed", "secret", s.Namespace+"/"+s.Name, "hosts", s.Hosts)
		}
	}
}

// GetCertificate is tls.Config's: the current certificate.
func (s *Serving) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaf == nil {
		return nil, errors.New("no serving certificate yet")
	}
	return s.leaf, nil
}

// CA is the certificate the webhook's caBundle holds (the Secret's
// ca.crt), for readiness: the sizer checks what it serves against its
// Secret, never against the webhook configuration it cannot read.
func (s *Serving) CA() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.anchor
}
