package sizer

import (
	"encoding/base64"
	"fmt"
	"time"

	"sigs.k8s.io/yaml"
)

// WebhookName is the one webhook of the sizer's MutatingWebhookConfiguration.
const WebhookName = "sizer.cgwarden.io"

// CAComponent is the install step of the CA for a kustomize install
// (`cgwarden-sizer ca`): a kustomize Component, as files by name, that
// adds the CA Secret namespace/secret (NewCASecret) and sets the caBundle
// of MutatingWebhookConfiguration webhookConfig to its certificate.
// The operator adds it to the overlay that installs deploy/kustomize/sizer
// (docs/sizing.md). The CA, set once here, is what lets the sizer rotate
// its serving certificates without any permission on the webhook
// configuration: only whoever installs can change what the API server
// trusts. The CA's key is in secret.yaml: keep it as the cluster's other
// Secrets are kept (not in plain git).
func CAComponent(namespace, secret, webhookConfig string, now time.Time) (map[string][]byte, error) {
	s, err := NewCASecret(namespace, secret, now)
	if err != nil {
		return nil, err
	}
	sy, err := yaml.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("CA secret: %w", err)
	}
	// A JSON patch rather than a strategic merge: it fails the build if
	// the first webhook is not the sizer's, instead of adding one.
	patch := []PatchOp{
		{Op: "test", Path: "/webhooks/0/name", Value: WebhookName},
		{Op: "add", Path: "/webhooks/0/clientConfig/caBundle", Value: base64.StdEncoding.EncodeToString(s.Data[SecretCA])},
	}
	py, err := yaml.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("caBundle patch: %w", err)
	}
	kust := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1alpha1",
		"kind":       "Component",
		"resources":  []string{"secret.yaml"},
		"patches": []map[string]any{{
			"target": map[string]string{"group": "admissionregistration.k8s.io", "version": "v1", "kind": "MutatingWebhookConfiguration", "name": webhookConfig},
			"path":   "cabundle-patch.yaml",
		}},
	}
	ky, err := yaml.Marshal(kust)
	if err != nil {
		return nil, fmt.Errorf("kustomization: %w", err)
	}
	head := "# Made by `cgwarden-sizer ca` " + now.UTC().Format(time.RFC3339) + ": the sizer's CA (docs/sizing.md).\n"
	return map[string][]byte{
		"kustomization.yaml":  append([]byte(head), ky...),
		"secret.yaml":         append([]byte(head+"# Holds the CA's private key: keep it as the cluster's other Secrets are kept.\n"), sy...),
		"cabundle-patch.yaml": append([]byte(head), py...),
	}, nil
}
