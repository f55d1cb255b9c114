package cluster

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// grant is one (resource, resource name, verb) that an identity holds, as
// `kubectl auth can-i --list` names them: "resource[.group]", "" for any
// name.
type grant struct{ resource, name, verb string }

func (g grant) String() string {
	if g.name == "" {
		return g.resource + " " + g.verb
	}
	return g.resource + "/" + g.name + " " + g.verb
}

// TestCanIListIsTheTable: `kubectl auth can-i --list` for each identity
// the manifests make or expect shows exactly the rules of docs/security.md's
// table "Identities" beyond what an identity bound to nothing is shown: no
// rule the table does not name, none it names missing. The roles and
// bindings are the rendered kustomize configurations (base, sizer,
// size-policy), renamed into a namespace of the test's own; the plugin's
// roles, which the manifests bind to no one, are bound to a stand-in user.
func TestCanIListIsTheTable(t *testing.T) {
	e := cluster(t)
	ns := e.namespace(t)
	want := identityTable(t, "../../docs/security.md")
	installRBAC(t, e, ns, []string{"base", "sizer", "size-policy"})
	bindPluginUserRoles(t, e, ns)

	baseline := canIList(t, e, ns, "cgwarden-test-unbound")
	for id, rules := range want {
		sa := id[strings.LastIndex(id, ":")+1:]
		var got []grant
		for _, g := range canIList(t, e, ns, sa) {
			if !slices.Contains(baseline, g) {
				got = append(got, g)
			}
		}
		if extra := minus(got, rules); len(extra) > 0 {
			t.Errorf("%s holds what docs/security.md's table does not say: %v", id, extra)
		}
		if missing := minus(rules, got); len(missing) > 0 {
			t.Errorf("%s lacks what docs/security.md's table says it holds: %v", id, missing)
		}
	}
}

// minus is a without b.
func minus(a, b []grant) []grant {
	var out []grant
	for _, g := range a {
		if !slices.Contains(b, g) {
			out = append(out, g)
		}
	}
	return out
}

// identityTable reads the table under "## Identities" in doc: each
// identity (the first backquoted word of its cell, "namespace:name" for a
// ServiceAccount, a role's name for the users bound to it) and its grants,
// one per verb.
func identityTable(t *testing.T, doc string) map[string][]grant {
	t.Helper()
	f, err := os.Open(doc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tick := regexp.MustCompile("`([^`]+)`")
	out := map[string][]grant{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Identities"
			continue
		case !in || !strings.HasPrefix(line, "| `"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 5 {
			t.Fatalf("%s: a row of the identities table with %d cells, want 5: %s", doc, len(cells), line)
		}
		id := tick.FindStringSubmatch(cells[0])
		if id == nil {
			t.Fatalf("%s: no identity in %q", doc, cells[0])
		}
		rules := out[id[1]]
		if res := tick.FindStringSubmatch(cells[2]); res != nil {
			name := ""
			if m := tick.FindStringSubmatch(cells[3]); m != nil {
				name = m[1]
			}
			for _, v := range strings.Split(cells[4], ",") {
				rules = append(rules, grant{res[1], name, strings.TrimSpace(v)})
			}
		}
		out[id[1]] = rules
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"cgwarden-system:cgwarden", "cgwarden-system:cgwarden-reader", "cgwarden-sizer:cgwarden-sizer", "cgwarden-plugin-user"} {
		if _, ok := out[id]; !ok {
			t.Fatalf("%s: the identities table has no row for %s", doc, id)
		}
	}
	return out
}

// canIRow is a line of `kubectl auth can-i --list`: resource, non-resource
// URLs, resource names, verbs.
var canIRow = regexp.MustCompile(`^(\S*)\s+\[([^]]*)\]\s+\[([^]]*)\]\s+\[([^]]*)\]$`)

// canIList runs `kubectl auth can-i --list` as ServiceAccount sa of ns, in
// ns, and returns its resource rules, one per name and verb.
func canIList(t *testing.T, e *env, ns, sa string) []grant {
	t.Helper()
	out, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "auth", "can-i", "--list",
		"--as=system:serviceaccount:"+ns+":"+sa, "-n", ns).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl auth can-i --list as %s: %v\n%s", sa, err, out)
	}
	var gs []grant
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines[1:] { // the header
		m := canIRow.FindStringSubmatch(strings.TrimRight(line, " "))
		if m == nil {
			t.Fatalf("kubectl auth can-i --list as %s: cannot read %q", sa, line)
		}
		if m[1] == "" { // a non-resource URL
			continue
		}
		names := strings.Fields(m[3])
		if len(names) == 0 {
			names = []string{""}
		}
		for _, n := range names {
			for _, v := range strings.Fields(m[4]) {
				gs = append(gs, grant{m[1], n, v})
			}
		}
	}
	return gs
}

// installRBAC creates the Roles, ClusterRoles and their bindings of the
// rendered kustomize configurations dirs: Roles and the bindings'
// ServiceAccounts in ns, ClusterRoles (and ClusterRoleBindings) under
// their name and "-"+ns, all removed at the test's end.
func installRBAC(t *testing.T, e *env, ns string, dirs []string) {
	t.Helper()
	ctx := context.Background()
	rbac := e.cs.RbacV1()
	suffix := "-" + ns
	subjects := func(ss []rbacv1.Subject) []rbacv1.Subject {
		for i := range ss {
			ss[i].Namespace = ns
		}
		return ss
	}
	for _, dir := range dirs {
		out, err := exec.Command(e.kubectl, "kustomize", "../../deploy/kustomize/"+dir).Output()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		for _, doc := range strings.Split(string(out), "\n---\n") {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatal(err)
			}
			switch meta.Kind {
			case "Role":
				var r rbacv1.Role
				mustUnmarshal(t, doc, &r)
				r.Namespace, r.Labels = ns, nil
				if _, err := rbac.Roles(ns).Create(ctx, &r, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			case "RoleBinding":
				var b rbacv1.RoleBinding
				mustUnmarshal(t, doc, &b)
				b.Namespace, b.Labels, b.Subjects = ns, nil, subjects(b.Subjects)
				if b.RoleRef.Kind == "ClusterRole" {
					b.RoleRef.Name += suffix
				}
				if _, err := rbac.RoleBindings(ns).Create(ctx, &b, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			case "ClusterRole":
				var r rbacv1.ClusterRole
				mustUnmarshal(t, doc, &r)
				r.Name, r.Labels = r.Name+suffix, nil
				if _, err := rbac.ClusterRoles().Create(ctx, &r, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), r.Name, metav1.DeleteOptions{}) })
			case "ClusterRoleBinding":
				var b rbacv1.ClusterRoleBinding
				mustUnmarshal(t, doc, &b)
				b.Name, b.Labels, b.Subjects = b.Name+suffix, nil, subjects(b.Subjects)
				b.RoleRef.Name += suffix
				if _, err := rbac.ClusterRoleBindings().Create(ctx, &b, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_ = rbac.ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
				})
			}
		}
	}
}

// bindPluginUserRoles binds the plugin's Role and ClusterRole
// (cgwarden-plugin-user, installed by installRBAC) to a ServiceAccount of
// that name in ns, standing in for a user an administrator binds.
func bindPluginUserRoles(t *testing.T, e *env, ns string) {
	t.Helper()
	ctx := context.Background()
	const name = "cgwarden-plugin-user"
	user := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Subjects: user,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}}
	if _, err := e.cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + ns}, Subjects: user,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name + "-" + ns}}
	if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
}

func mustUnmarshal(t *testing.T, doc string, v any) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(doc), v); err != nil {
		t.Fatal(err)
	}
}
