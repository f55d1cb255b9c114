package sizer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cgwarden/cgwarden/internal/certs"
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
// (DNS names or IP addresses, the first its subject), valid from now.
func GenerateCerts(hosts []string, now time.Time) (Certs, error) {
	ca, err := certs.NewCA("cgwarden-sizer-ca", now, certLifetime)
	if err != nil {
		return Certs{}, err
	}
	name := "cgwarden-sizer"
	if len(hosts) > 0 {
		name = hosts[0]
	}
	p, err := ca.Sign(name, hosts, now, certLifetime)
	if err != nil {
		return Certs{}, err
	}
	return Certs{CA: ca.PEM, Cert: p.Cert, Key: p.Key}, nil
}

// Check reports why certs cannot serve hosts at now (expired or expiring
// within certRenewBefore, a host missing, not signed by the CA), or nil.
func (c Certs) Check(hosts []string, now time.Time) error {
	return certs.Pair{Cert: c.Cert, Key: c.Key}.Verify(c.CA, hosts, now.Add(certRenewBefore))
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
