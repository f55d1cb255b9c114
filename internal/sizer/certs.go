package sizer

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Keys of the serving certificate Secret (a kubernetes.io/tls Secret, plus
// the CA that signed it).
const (
	SecretCA   = "ca.crt"
	SecretCert = corev1.TLSCertKey
	SecretKey  = corev1.TLSPrivateKeyKey
)

// certLifetime is how long generated certificates last; a certificate
// with less than certRenewBefore left is regenerated at start.
const (
	certLifetime    = 5 * 365 * 24 * time.Hour
	certRenewBefore = 30 * 24 * time.Hour
)

// Certs is a CA and the serving certificate it signed, PEM-encoded.
type Certs struct {
	CA, Cert, Key []byte
}

// GenerateCerts makes a self-signed CA and a serving certificate for hosts
// (DNS names or IP addresses), valid from now.
func GenerateCerts(hosts []string, now time.Time) (Certs, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Certs{}, fmt.Errorf("CA key: %w", err)
	}
	serial := func() *big.Int {
		n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
		return n
	}
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "cgwarden-sizer-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certLifetime),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Certs{}, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Certs{}, fmt.Errorf("CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Certs{}, fmt.Errorf("serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "cgwarden-sizer"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certLifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if len(hosts) > 0 {
		tmpl.Subject.CommonName = hosts[0]
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return Certs{}, fmt.Errorf("serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Certs{}, fmt.Errorf("serving key: %w", err)
	}
	return Certs{
		CA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// Check reports why certs cannot serve hosts at now (expired or expiring
// within certRenewBefore, a host missing, not signed by the CA), or nil.
func (c Certs) Check(hosts []string, now time.Time) error {
	pair, err := tls.X509KeyPair(c.Cert, c.Key)
	if err != nil {
		return fmt.Errorf("key pair: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CA) {
		return errors.New("no CA certificate")
	}
	for _, h := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, CurrentTime: now.Add(certRenewBefore)}); err != nil {
			return fmt.Errorf("for %s: %w", h, err)
		}
	}
	return nil
}

// EnsureSecretCerts returns the certificates kept in Secret namespace/name,
// generating and storing new ones when it is absent or they do not serve
// hosts. Two replicas starting together: the one whose create loses reads
// the winner's.
func EnsureSecretCerts(ctx context.Context, cs kubernetes.Interface, namespace, name string, hosts []string, now time.Time) (Certs, bool, error) {
	secrets := cs.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return Certs{}, false, fmt.Errorf("secret %s/%s: %w", namespace, name, err)
	}
	exists := err == nil
	if exists {
		c := Certs{CA: s.Data[SecretCA], Cert: s.Data[SecretCert], Key: s.Data[SecretKey]}
		if c.Check(hosts, now) == nil {
			return c, false, nil
		}
	}
	c, err := GenerateCerts(hosts, now)
	if err != nil {
		return Certs{}, false, err
	}
	data := map[string][]byte{SecretCA: c.CA, SecretCert: c.Cert, SecretKey: c.Key}
	if !exists {
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/name": "cgwarden-sizer"}},
			Type:       corev1.SecretTypeTLS, Data: data,
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return EnsureSecretCerts(ctx, cs, namespace, name, hosts, now)
		}
	} else {
		s.Data = data
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		return Certs{}, false, fmt.Errorf("secret %s/%s: %w", namespace, name, err)
	}
	return c, true, nil
}

// PatchCABundle sets every webhook's clientConfig.caBundle in the named
// MutatingWebhookConfiguration to ca, if it differs. It returns how many
// it changed.
func PatchCABundle(ctx context.Context, cs kubernetes.Interface, config string, ca []byte) (int, error) {
	mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, config, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("MutatingWebhookConfiguration %s: %w", config, err)
	}
	var ops []PatchOp
	for i, w := range mwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, ca) {
			// A test op first: a concurrent edit of the list fails the
			// patch instead of setting the wrong webhook.
			ops = append(ops, PatchOp{Op: "test", Path: fmt.Sprintf("/webhooks/%d/name", i), Value: w.Name},
				PatchOp{Op: "add", Path: fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), Value: ca})
		}
	}
	if len(ops) == 0 {
		return 0, nil
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return 0, fmt.Errorf("caBundle patch: %w", err)
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, config, types.JSONPatchType, b, metav1.PatchOptions{FieldManager: "cgwarden-sizer"}); err != nil {
		return 0, fmt.Errorf("MutatingWebhookConfiguration %s: caBundle: %w", config, err)
	}
	return len(ops) / 2, nil
}
