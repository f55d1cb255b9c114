package serve

import (
	"crypto/tls"
	"time"

	"github.com/cgwarden/cgwarden/internal/certs"
)

// SelfSigned makes a serving certificate for hosts (names or IPs), valid
// for a year, signed by itself — what the kubelet does without
// --tls-cert-file. Clients must skip verification (metrics-server's
// --kubelet-insecure-tls) or pin it; a certificate from files is better.
func SelfSigned(hosts []string) (tls.Certificate, error) {
	p, err := certs.SelfSigned("cgwarden", hosts, time.Now(), 365*24*time.Hour)
	if err != nil {
		return tls.Certificate{}, err
	}
	return p.TLS()
}
