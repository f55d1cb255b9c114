package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Backdate is how long before now a certificate's validity starts, for
// clocks a little behind the issuer's.
const Backdate = time.Hour

// Pair is a certificate and its private key, PEM-encoded.
type Pair struct {
	Cert, Key []byte
}

// CA is a certificate authority that signs serving and client
// certificates.
type CA struct {
	cert *x509.Certificate
	// key signs: ECDSA when made here, RSA when made by Helm's genCA.
	key crypto.Signer
	// PEM is the CA's certificate, PEM-encoded: what clients trust.
	PEM []byte
}

// NewCA makes a self-signed CA called name, valid from now for lifetime.
func NewCA(name string, now time.Time, lifetime time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl, err := template(name, now, lifetime)
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid, tmpl.IsCA = true, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	return &CA{cert: cert, key: key, PEM: encode("CERTIFICATE", der)}, nil
}

// KeyPEM is the CA's private key, PEM-encoded (PKCS #8): what whoever
// signs with this CA later must keep, and nobody else.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	return encode("PRIVATE KEY", der), nil
}

// NotAfter is the end of the CA's validity: nothing it signs outlives it.
func (ca *CA) NotAfter() time.Time { return ca.cert.NotAfter }

// LoadCA is the CA whose certificate and private key are certPEM and
// keyPEM (PKCS #1, PKCS #8 or SEC 1: whatever made it, this package or
// Helm's genCA). It refuses a certificate that is not a CA's.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key pair: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("certificate %q is not a CA's (no basic constraints CA:TRUE with keyCertSign)", cert.Subject.CommonName)
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key: %T cannot sign", pair.PrivateKey)
	}
	return &CA{cert: cert, key: key, PEM: encode("CERTIFICATE", cert.Raw)}, nil
}

// Sign makes a serving certificate for hosts (DNS names or IP addresses)
// signed by the CA, valid from now for lifetime, with name as its subject.
func (ca *CA) Sign(name string, hosts []string, now time.Time, lifetime time.Duration) (Pair, error) {
	return issue(Subject{Name: name, Hosts: hosts}, now, lifetime, ca)
}

// Subject is who a certificate names and what it may be used for.
type Subject struct {
	// Name is the common name: a Kubernetes user, when the certificate
	// is a client's.
	Name string
	// Groups are the organizations: a client's Kubernetes groups
	// (system:masters, system:nodes).
	Groups []string
	// Hosts are the DNS names and IP addresses a server serves.
	Hosts []string
	// Client: also a TLS client certificate (the kubelet's, an API
	// server's client); a certificate is always a server's.
	Client bool
}

// Issue makes a certificate for sub signed by the CA, valid from now for
// lifetime: the certificates of a cluster's components (the lane's API
// server, kubelet and clients).
func (ca *CA) Issue(sub Subject, now time.Time, lifetime time.Duration) (Pair, error) {
	return issue(sub, now, lifetime, ca)
}

// SelfSigned makes a serving certificate for hosts signed by its own key:
// clients pin it or skip verification (metrics-server's
// --kubelet-insecure-tls), as with a kubelet's self-signed certificate.
func SelfSigned(name string, hosts []string, now time.Time, lifetime time.Duration) (Pair, error) {
	return issue(Subject{Name: name, Hosts: hosts}, now, lifetime, nil)
}

// issue makes a certificate for sub, signed by ca or, when ca is nil, by
// itself.
func issue(sub Subject, now time.Time, lifetime time.Duration, ca *CA) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("key for %q: %w", sub.Name, err)
	}
	tmpl, err := template(sub.Name, now, lifetime)
	if err != nil {
		return Pair{}, err
	}
	tmpl.Subject.Organization = sub.Groups
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	if sub.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, h := range sub.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	parent, signer := tmpl, crypto.Signer(key)
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return Pair{}, fmt.Errorf("certificate for %q: %w", sub.Name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("key for %q: %w", sub.Name, err)
	}
	return Pair{Cert: encode("CERTIFICATE", der), Key: encode("EC PRIVATE KEY", keyDER)}, nil
}

// SigningKey makes a key pair that signs tokens rather than TLS
// sessions (a cluster's service-account key): the private key
// ("EC PRIVATE KEY") and its public key ("PUBLIC KEY", PKIX).
func SigningKey() (private, public []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("signing key: %w", err)
	}
	priv, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing key: %w", err)
	}
	return encode("EC PRIVATE KEY", priv), encode("PUBLIC KEY", pub), nil
}

// template is what every certificate made here shares: a random 128-bit
// serial (RFC 5280 4.1.2.2 allows up to 20 octets) and the validity.
func template(name string, now time.Time, lifetime time.Duration) (*x509.Certificate, error) {
	if lifetime <= 0 {
		return nil, fmt.Errorf("certificate %q: lifetime %s is not positive", name, lifetime)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	return &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-Backdate), NotAfter: now.Add(lifetime),
	}, nil
}

func encode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// TLS is the pair as crypto/tls serves it.
func (p Pair) TLS() (tls.Certificate, error) {
	c, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("key pair: %w", err)
	}
	return c, nil
}

// Verify reports why the pair does not serve every one of hosts at time
// at, signed by the CA certificate caPEM (key and certificate not a pair,
// expired or not yet valid, a host missing, another signer), or nil.
func (p Pair) Verify(caPEM []byte, hosts []string, at time.Time) error {
	c, err := p.TLS()
	if err != nil {
		return err
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return fmt.Errorf("certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no CA certificate")
	}
	for _, h := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, CurrentTime: at}); err != nil {
			return fmt.Errorf("for %s: %w", h, err)
		}
	}
	return nil
}
