package sizer

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestGenerateCerts(t *testing.T) {
	now := time.Now()
	hosts := []string{"cgwarden-sizer.cgwarden.svc", "127.0.0.1"}
	c, err := GenerateCerts(hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check(hosts, now); err != nil {
		t.Fatal(err)
	}
	if err := c.Check([]string{"other.svc"}, now); err == nil {
		t.Error("a certificate for another name passed")
	}
	if err := c.Check(hosts, now.Add(certLifetime-certRenewBefore/2)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("a certificate about to expire passed: %v", err)
	}
	other, _ := GenerateCerts(hosts, now)
	if err := (Certs{CA: other.CA, Cert: c.Cert, Key: c.Key}).Check(hosts, now); err == nil {
		t.Error("a certificate signed by another CA passed")
	}
}

func TestEnsureSecretCertsAndCABundle(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "cgwarden-sizer"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "a.cgwarden.io"}, {Name: "b.cgwarden.io"}},
	})
	hosts := []string{"cgwarden-sizer.cgwarden.svc"}
	c1, made, err := EnsureSecretCerts(ctx, cs, "cgwarden", "cgwarden-sizer-tls", hosts, time.Now())
	if err != nil || !made {
		t.Fatalf("first: made %v, %v", made, err)
	}
	c2, made, err := EnsureSecretCerts(ctx, cs, "cgwarden", "cgwarden-sizer-tls", hosts, time.Now())
	if err != nil || made || string(c2.CA) != string(c1.CA) {
		t.Fatalf("second: made %v, same CA %v, %v", made, string(c2.CA) == string(c1.CA), err)
	}
	c3, made, err := EnsureSecretCerts(ctx, cs, "cgwarden", "cgwarden-sizer-tls", []string{"new.name"}, time.Now())
	if err != nil || !made || string(c3.CA) == string(c1.CA) {
		t.Fatalf("new host: made %v, %v", made, err)
	}
	n, err := PatchCABundle(ctx, cs, "cgwarden-sizer", c3.CA)
	if err != nil || n != 2 {
		t.Fatalf("patched %d, %v", n, err)
	}
	if n, err := PatchCABundle(ctx, cs, "cgwarden-sizer", c3.CA); err != nil || n != 0 {
		t.Fatalf("again: patched %d, %v", n, err)
	}
	mwc, _ := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "cgwarden-sizer", metav1.GetOptions{})
	for _, w := range mwc.Webhooks {
		if string(w.ClientConfig.CABundle) != string(c3.CA) {
			t.Errorf("%s: caBundle not set", w.Name)
		}
	}
}
