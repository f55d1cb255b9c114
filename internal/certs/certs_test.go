package certs

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// handshake serves pair on loopback and dials it as a client trusting
// caPEM and asking for serverName, at the real time (crypto/tls has no
// clock of ours). It returns the client's error.
func handshake(t *testing.T, pair Pair, caPEM []byte, serverName string) error {
	t.Helper()
	c, err := pair.TLS()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{c}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		_ = conn.(*tls.Conn).Handshake()
		conn.Close()
	}()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA PEM does not parse")
	}
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: serverName})
	if err != nil {
		return err
	}
	return conn.Close()
}

// TestCASigns: a client that trusts the CA accepts the certificate it
// signed for each of its hosts, names and IPs, and no other host; a client
// trusting another CA refuses it.
func TestCASigns(t *testing.T) {
	wall := time.Now()
	ca, err := NewCA("test-ca", wall, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"cgwarden-sizer.cgwarden-system.svc", "localhost", "127.0.0.1"}
	pair, err := ca.Sign(hosts[0], hosts, wall, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if err := handshake(t, pair, ca.PEM, h); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	if err := handshake(t, pair, ca.PEM, "other.svc"); err == nil {
		t.Error("a host the certificate does not name was accepted")
	}
	other, err := NewCA("other-ca", wall, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, pair, other.PEM, hosts[0]); err == nil {
		t.Error("a client trusting another CA accepted the certificate")
	}
}

// TestSelfSigned: a client pinning the certificate itself accepts it; one
// trusting a CA refuses it.
func TestSelfSigned(t *testing.T) {
	wall := time.Now()
	pair, err := SelfSigned("cgwarden", []string{"node-1", "127.0.0.1", ""}, wall, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"node-1", "127.0.0.1"} {
		if err := handshake(t, pair, pair.Cert, h); err != nil {
			t.Errorf("%s pinned: %v", h, err)
		}
	}
	ca, err := NewCA("test-ca", wall, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, pair, ca.PEM, "node-1"); err == nil {
		t.Error("a self-signed certificate was accepted by a client trusting a CA")
	}
}

// TestVerify: expiry, validity start, hosts, signer and key are each
// checked at the time given.
func TestVerify(t *testing.T) {
	ca, err := NewCA("test-ca", now, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"a.svc", "10.0.0.1"}
	pair, err := ca.Sign("a.svc", hosts, now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := pair.Verify(ca.PEM, hosts, now); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	if err := pair.Verify(ca.PEM, hosts, now.Add(-Backdate/2)); err != nil {
		t.Errorf("backdated by %s, half of that earlier: %v", Backdate, err)
	}
	other, err := NewCA("other-ca", now, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherPair, err := other.Sign("a.svc", hosts, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		pair  Pair
		ca    []byte
		hosts []string
		at    time.Time
		want  string
	}{
		"expired":       {pair, ca.PEM, hosts, now.Add(25 * time.Hour), "expired"},
		"not yet valid": {pair, ca.PEM, hosts, now.Add(-2 * Backdate), "expired or is not yet valid"},
		"other host":    {pair, ca.PEM, []string{"b.svc"}, now, "b.svc"},
		"other IP":      {pair, ca.PEM, []string{"10.0.0.2"}, now, "10.0.0.2"},
		"other signer":  {pair, other.PEM, hosts, now, "unknown authority"},
		"no CA":         {pair, nil, hosts, now, "no CA certificate"},
		"wrong key":     {Pair{Cert: pair.Cert, Key: otherPair.Key}, ca.PEM, hosts, now, "key pair"},
		"garbage":       {Pair{Cert: []byte("x"), Key: []byte("y")}, ca.PEM, hosts, now, "key pair"},
	} {
		err := c.pair.Verify(c.ca, c.hosts, c.at)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}

// TestLifetime: a certificate lasts what was asked, and a lifetime that is
// not positive is an error rather than a certificate already expired.
func TestLifetime(t *testing.T) {
	pair, err := SelfSigned("x", []string{"x"}, now, 5*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pair.TLS()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.NotBefore.Equal(now.Add(-Backdate)) || !leaf.NotAfter.Equal(now.Add(5*time.Hour)) {
		t.Errorf("valid %s to %s", leaf.NotBefore, leaf.NotAfter)
	}
	if leaf.Subject.CommonName != "x" || leaf.IsCA {
		t.Errorf("subject %q, CA %v", leaf.Subject.CommonName, leaf.IsCA)
	}
	if _, err := NewCA("x", now, 0); err == nil {
		t.Error("a CA with no lifetime was made")
	}
	if _, err := SelfSigned("x", nil, now, -time.Hour); err == nil {
		t.Error("a certificate with a negative lifetime was made")
	}
}

// clientHandshake serves server on loopback, requiring a client
// certificate signed by caPEM, and dials it with client. It returns the
// client certificate's subject the server saw, or the server's error.
func clientHandshake(t *testing.T, server, client Pair, caPEM []byte) (pkix.Name, error) {
	t.Helper()
	sc, err := server.TLS()
	if err != nil {
		t.Fatal(err)
	}
	cc, err := client.TLS()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA PEM does not parse")
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{sc}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		err error
		sub pkix.Name
	}
	done := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer conn.Close()
		tc := conn.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			done <- result{err: err}
			return
		}
		done <- result{sub: tc.ConnectionState().PeerCertificates[0].Subject}
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cc}})
	if err == nil {
		_, _ = conn.Read(make([]byte, 1)) // the server's verdict on the client certificate arrives with the first read
		conn.Close()
	}
	r := <-done
	return r.sub, r.err
}

// TestIssueClient: a certificate issued for a client, with groups, is
// accepted by a server that trusts the CA and requires client
// certificates, which sees its name and groups (what the API server reads
// as user and groups); a serving certificate from Sign is refused as a
// client's.
func TestIssueClient(t *testing.T) {
	wall := time.Now()
	ca, err := NewCA("test-ca", wall, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue(Subject{Name: "kube-apiserver", Hosts: []string{"127.0.0.1"}, Client: true}, wall, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(Subject{Name: "system:node:n1", Groups: []string{"system:nodes"}, Client: true}, wall, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := clientHandshake(t, server, client, ca.PEM)
	if err != nil {
		t.Fatalf("client certificate refused: %v", err)
	}
	if sub.CommonName != "system:node:n1" || strings.Join(sub.Organization, ",") != "system:nodes" {
		t.Errorf("server saw CN %q O %q, want system:node:n1 and system:nodes", sub.CommonName, sub.Organization)
	}
	servingOnly, err := ca.Sign("n1", []string{"n1"}, wall, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clientHandshake(t, server, servingOnly, ca.PEM); err == nil {
		t.Error("a serving-only certificate was accepted as a client's")
	}
}

// TestSigningKey: the public key is the private key's.
func TestSigningKey(t *testing.T) {
	priv, pub, err := SigningKey()
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := pem.Decode(priv)
	ub, _ := pem.Decode(pub)
	if pb == nil || pb.Type != "EC PRIVATE KEY" || ub == nil || ub.Type != "PUBLIC KEY" {
		t.Fatalf("PEM blocks %v %v, want EC PRIVATE KEY and PUBLIC KEY", pb, ub)
	}
	k, err := x509.ParseECPrivateKey(pb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	p, err := x509.ParsePKIXPublicKey(ub.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !k.PublicKey.Equal(p) {
		t.Error("the public key is not the private key's")
	}
}

// A CA kept as PEM (its certificate and KeyPEM) signs again when loaded,
// and a serving certificate is not taken for a CA.
func TestLoadCA(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("test-ca", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(ca.PEM, key)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loaded.Sign("svc", []string{"svc.ns.svc"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(ca.PEM, []string{"svc.ns.svc"}, now); err != nil {
		t.Errorf("signed by the loaded CA, not verified by the original: %v", err)
	}
	if !loaded.NotAfter().Equal(ca.NotAfter()) {
		t.Errorf("NotAfter %v, want %v", loaded.NotAfter(), ca.NotAfter())
	}
	if _, err := LoadCA(p.Cert, p.Key); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Errorf("a serving certificate loaded as a CA: %v", err)
	}
}
