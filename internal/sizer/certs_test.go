package sizer

import (
	"context"
	"crypto/x509"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/certs"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// serving is a Serving of Secret cgwarden-sizer/cgwarden-sizer-ca on cs
// for hosts, at *now.
func serving(cs *fake.Clientset, hosts []string, now *time.Time) *Serving {
	return &Serving{Client: cs, Namespace: "cgwarden-sizer", Name: "cgwarden-sizer-ca", Hosts: hosts,
		Now: func() time.Time { return *now }, Log: slog.New(slog.DiscardHandler)}
}

// The install's CA (NewCASecret) signs the sizer's serving certificates:
// one at start, the same until it nears its end or the CA changes, each
// verified by the Secret's ca.crt (the webhook's caBundle) and never past
// the CA's end. The sizer only reads the Secret: no write of it, and no
// call on any webhook configuration.
func TestServingSignsWithTheInstalledCA(t *testing.T) {
	now := time.Now()
	sec, err := NewCASecret("cgwarden-sizer", "cgwarden-sizer-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	if sec.Type != corev1.SecretTypeTLS || string(sec.Data[SecretCA]) != string(sec.Data[SecretCert]) || len(sec.Data[SecretKey]) == 0 {
		t.Fatalf("CA Secret: type %s, keys %v", sec.Type, keysOf(sec.Data))
	}
	cs := fake.NewClientset(sec)
	hosts := []string{"cgwarden-sizer.cgwarden-sizer.svc"}
	s := serving(cs, hosts, &now)
	ctx := context.Background()
	if made, err := s.Load(ctx); err != nil || !made {
		t.Fatalf("first load: made %v, %v", made, err)
	}
	first, _ := s.GetCertificate(nil)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(sec.Data[SecretCA])
	if _, err := first.Leaf.Verify(x509.VerifyOptions{DNSName: hosts[0], Roots: pool, CurrentTime: now}); err != nil {
		t.Fatalf("served certificate not verified by the Secret's ca.crt: %v", err)
	}
	if string(s.CA()) != string(sec.Data[SecretCA]) {
		t.Error("CA() is not the Secret's ca.crt")
	}
	if made, err := s.Load(ctx); err != nil || made {
		t.Errorf("reload with the same CA: made %v, %v", made, err)
	}
	// Near its end: a new one.
	now = first.Leaf.NotAfter.Add(-leafRenewBefore / 2)
	if made, err := s.Load(ctx); err != nil || !made {
		t.Errorf("reload near the end: made %v, %v", made, err)
	}
	// A new CA at install (the Secret replaced): a new certificate from it.
	now = time.Now()
	other, _ := NewCASecret("cgwarden-sizer", "cgwarden-sizer-ca", now)
	if _, err := cs.CoreV1().Secrets("cgwarden-sizer").Update(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if made, err := s.Load(ctx); err != nil || !made {
		t.Fatalf("reload with a new CA: made %v, %v", made, err)
	}
	c, _ := s.GetCertificate(nil)
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(other.Data[SecretCA])
	if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: hosts[0], Roots: pool, CurrentTime: now}); err != nil {
		t.Errorf("not signed by the new CA: %v", err)
	}
	// Close to the CA's end: the certificate ends with it.
	ca, _, _ := caOf(other)
	now = ca.NotAfter().Add(-48 * time.Hour)
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.GetCertificate(nil); c.Leaf.NotAfter.After(ca.NotAfter()) {
		t.Errorf("serving certificate ends %v, after its CA (%v)", c.Leaf.NotAfter, ca.NotAfter())
	}
	now = ca.NotAfter().Add(time.Hour)
	if _, err := s.Load(ctx); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("an expired CA: %v", err)
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() != "get" || a.GetResource().Resource != "secrets" {
			if _, ok := a.(k8stesting.UpdateAction); ok && a.GetResource().Resource == "secrets" {
				continue // the test's own replacement of the CA
			}
			t.Errorf("the sizer called %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// Without the Secret, or with one that holds no CA (an older sizer's,
// whose tls.crt is a serving certificate), the sizer says what to do
// rather than making a CA of its own.
func TestServingRefusesWithoutAnInstalledCA(t *testing.T) {
	now := time.Now()
	hosts := []string{"cgwarden-sizer.cgwarden-sizer.svc"}
	if _, err := serving(fake.NewClientset(), hosts, &now).Load(context.Background()); err == nil || !strings.Contains(err.Error(), "cgwarden-sizer ca") {
		t.Errorf("no Secret: %v", err)
	}
	ca, _ := certs.NewCA("old", now, time.Hour)
	leaf, _ := ca.Sign("x", hosts, now, time.Hour)
	old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cgwarden-sizer", Name: "cgwarden-sizer-ca"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{SecretCA: ca.PEM, SecretCert: leaf.Cert, SecretKey: leaf.Key}}
	if _, err := serving(fake.NewClientset(old), hosts, &now).Load(context.Background()); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Errorf("a serving certificate in tls.crt: %v", err)
	}
	// ca.crt of another CA than tls.crt: what the API server trusts
	// would not verify what the sizer serves.
	other, _ := certs.NewCA("other", now, time.Hour)
	key, _ := other.KeyPEM()
	mixed := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cgwarden-sizer", Name: "cgwarden-sizer-ca"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{SecretCA: ca.PEM, SecretCert: other.PEM, SecretKey: key}}
	if _, err := serving(fake.NewClientset(mixed), hosts, &now).Load(context.Background()); err == nil || !strings.Contains(err.Error(), "not trusted by its ca.crt") {
		t.Errorf("mismatched ca.crt: %v", err)
	}
}

func keysOf(m map[string][]byte) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}
