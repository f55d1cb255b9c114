package deploytest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomizeWithCA builds the kustomize install of the sizer as
// docs/sizing.md says: an overlay of deploy/kustomize/sizer with the
// Component that `cgwarden-sizer ca` writes (the real binary's).
func kustomizeWithCA(t *testing.T) []object {
	t.Helper()
	overlay := t.TempDir()
	out, err := exec.Command(binary(t, "cgwarden-sizer"), "ca", "--out-dir", filepath.Join(overlay, "sizer-ca")).CombinedOutput()
	if err != nil {
		t.Fatalf("cgwarden-sizer ca: %v\n%s", err, out)
	}
	abs, err := filepath.Abs(filepath.Join(kustDir, "sizer"))
	if err != nil {
		t.Fatal(err)
	}
	// Kustomize takes a base by relative path only.
	base, err := filepath.Rel(overlay, abs)
	if err != nil {
		t.Fatal(err)
	}
	kust := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + base + "\ncomponents:\n  - sizer-ca\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		t.Fatalf("kustomize build of the overlay with the CA Component: %v", err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return split(t, string(y))
}

// withoutCA is objs with the CA's material left out: the Secret's data
// and the webhooks' caBundle (and the metadata the generator writes).
func withoutCA(objs []object) []object {
	var out []object
	for _, o := range objs {
		c := deepCopy(o)
		switch c["kind"] {
		case "Secret":
			delete(c, "data")
			delete(c["metadata"].(map[string]any), "creationTimestamp")
		case "MutatingWebhookConfiguration":
			for _, w := range c["webhooks"].([]any) {
				delete(w.(map[string]any)["clientConfig"].(map[string]any), "caBundle")
			}
		}
		out = append(out, c)
	}
	return out
}

func deepCopy(o object) object {
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			m := map[string]any{}
			for k, x := range v {
				m[k] = walk(x)
			}
			return m
		case []any:
			s := make([]any, len(v))
			for i, x := range v {
				s[i] = walk(x)
			}
			return s
		}
		return v
	}
	return object(walk(map[string]any(o)).(map[string]any))
}

// sizerBound are the roles bound to the sizer's ServiceAccount, by kind
// and name.
func sizerBound(objs []object) map[string]bool {
	bound := map[string]bool{}
	for _, o := range objs {
		if o["kind"] != "RoleBinding" && o["kind"] != "ClusterRoleBinding" {
			continue
		}
		subs, _ := o["subjects"].([]any)
		for _, s := range subs {
			if s := s.(map[string]any); s["kind"] == "ServiceAccount" && s["name"] == "cgwarden-sizer" {
				ref := o["roleRef"].(map[string]any)
				bound[ref["kind"].(string)+"/"+ref["name"].(string)] = true
			}
		}
	}
	return bound
}

// No configuration the project ships — every kustomize directory, the
// kustomize install with its CA Component, the chart in each mode — grants
// the sizer's ServiceAccount any verb on a webhook configuration (its own
// or another, by name or by wildcard): with patch on its own it could
// rewrite its rules, namespaceSelector, failurePolicy and clientConfig,
// and so see and rewrite every pod in the cluster. test/scale's
// TestSizerCannotWidenItsWebhook asks a real API server the same.
func TestSizerHoldsNothingOnWebhookConfigurations(t *testing.T) {
	check := func(cfg config) {
		bound := sizerBound(cfg.objs)
		for _, o := range cfg.objs {
			if o["kind"] != "ClusterRole" && o["kind"] != "Role" {
				continue
			}
			md := o["metadata"].(map[string]any)
			if !bound[o["kind"].(string)+"/"+md["name"].(string)] {
				continue
			}
			for _, r := range o["rules"].([]any) {
				r := r.(map[string]any)
				groups, resources := strs(r["apiGroups"]), strs(r["resources"])
				if !slices.Contains(groups, "admissionregistration.k8s.io") && !slices.Contains(groups, "*") {
					continue
				}
				for _, res := range resources {
					if res == "*" || strings.Contains(res, "webhookconfigurations") {
						t.Errorf("%s: %s %s grants the sizer %v on %s", cfg.name, o["kind"], md["name"], r["verbs"], res)
					}
				}
			}
		}
	}
	for _, cfg := range configurations(t) {
		check(cfg)
	}
	check(config{"kustomize sizer with its CA", kustomizeWithCA(t)})
}

// checkCA checks one install's CA: the Secret the Deployment's --ca-secret
// names (which the sizer's Role lets it get) holds a CA certificate and
// its key, and the webhook's caBundle is that certificate.
func checkCA(t *testing.T, name string, objs []object) {
	t.Helper()
	var secretName string
	var secret, mwc object
	for _, o := range objs {
		if o["kind"] == "Deployment" && o["metadata"].(map[string]any)["name"] == "cgwarden-sizer" {
			c := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			for _, a := range strs(c["args"]) {
				if v, ok := strings.CutPrefix(a, "--ca-secret="); ok {
					secretName = v
				}
			}
		}
	}
	if secretName == "" {
		t.Fatalf("%s: the sizer's Deployment names no --ca-secret", name)
	}
	for _, o := range objs {
		switch md := o["metadata"].(map[string]any); {
		case o["kind"] == "Secret" && md["name"] == secretName && md["namespace"] == "cgwarden-sizer":
			secret = o
		case o["kind"] == "MutatingWebhookConfiguration" && md["name"] == "cgwarden-sizer":
			mwc = o
		}
	}
	if secret == nil || mwc == nil {
		t.Fatalf("%s: Secret %s %v, webhook configuration %v", name, secretName, secret != nil, mwc != nil)
	}
	data := secret["data"].(map[string]any)
	dec := func(k string) []byte {
		s, _ := data[k].(string)
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: Secret %s key %s: %v", name, secretName, k, err)
		}
		return b
	}
	caPEM := dec("ca.crt")
	blk, _ := pem.Decode(caPEM)
	if blk == nil {
		t.Fatalf("%s: ca.crt is not PEM", name)
	}
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil || !ca.IsCA {
		t.Fatalf("%s: ca.crt is not a CA certificate (%v)", name, err)
	}
	if _, err := tls.X509KeyPair(dec("tls.crt"), dec("tls.key")); err != nil {
		t.Errorf("%s: tls.crt and tls.key are not a pair: %v", name, err)
	}
	if string(dec("tls.crt")) != string(caPEM) {
		t.Errorf("%s: tls.crt is not the CA of ca.crt", name)
	}
	for _, w := range mwc["webhooks"].([]any) {
		w := w.(map[string]any)
		got, _ := w["clientConfig"].(map[string]any)["caBundle"].(string)
		if got != data["ca.crt"] {
			t.Errorf("%s: webhook %s caBundle %.40q, want the Secret's ca.crt %.40q", name, w["name"], got, data["ca.crt"])
		}
	}
	role := false
	for _, o := range objs {
		if o["kind"] == "Role" && o["metadata"].(map[string]any)["name"] == "cgwarden-sizer" {
			for _, r := range rulesOf(o) {
				role = role || (r.resources == "secrets" && r.names == secretName && r.verbs == "get")
			}
		}
	}
	if !role {
		t.Errorf("%s: the sizer's Role does not let it get Secret %s", name, secretName)
	}
}

// Both installs put a caBundle on the webhook equal to the CA in the
// Secret the sizer reads: the chart (genCA at install) and kustomize
// (the Component of `cgwarden-sizer ca`). Before, the chart and the
// kustomize directory set none, and the sizer patched it in itself.
func TestSizerCABundleIsTheSecretsCA(t *testing.T) {
	checkCA(t, "chart sizer", helm(t, map[string]any{"sizer": map[string]any{"enabled": true}}))
	checkCA(t, "kustomize sizer with its CA", kustomizeWithCA(t))
}
