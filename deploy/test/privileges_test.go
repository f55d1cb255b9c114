package deploytest

import (
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// config is one rendered configuration of the manifests.
type config struct {
	name string
	objs []object
}

// configurations renders every kustomize directory and the chart in each
// mode it has (alone and together).
func configurations(t *testing.T) []config {
	t.Helper()
	rules := []any{"misplaced-container", "size-blind-weights", "besteffort-starvation"}
	fix := map[string]any{"rules": rules}
	nri := map[string]any{"enabled": true, "runtimeHandlers": []any{"wasmtime-spin-v2"}}
	sm := map[string]any{"enabled": true, "tls": map[string]any{"caSecret": map[string]any{"name": "ca"}, "serverName": "cgwarden.cgwarden-system.svc"}}
	out := []config{}
	for _, dir := range []string{"base", "fix", "fix-cgroup-v1", "nri", "node-scoped", "vm-namespaces", "servicemonitor", "sizer", "sizer-servicemonitor"} {
		out = append(out, config{"kustomize " + dir, kustomize(t, dir)})
	}
	for _, c := range []struct {
		name string
		vals map[string]any
	}{
		{"chart defaults", nil},
		{"chart fix", map[string]any{"fix": fix}},
		{"chart fix cgroup v1", map[string]any{"fix": map[string]any{"rules": rules, "cgroupV1": true}}},
		{"chart nri", map[string]any{"nri": nri}},
		{"chart fix+nri", map[string]any{"fix": fix, "nri": nri}},
		{"chart cri", map[string]any{"metadata": map[string]any{"source": "cri"}}},
		{"chart auth off", map[string]any{"auth": map[string]any{"enabled": false}, "listen": map[string]any{"address": "127.0.0.1"}}},
		{"chart sizer", map[string]any{"sizer": map[string]any{"enabled": true}}},
		{"chart size policy", map[string]any{"sizePolicy": map[string]any{"enabled": true}}},
		{"chart node-scoped", map[string]any{"metadata": map[string]any{"nodeScoped": true}}},
		{"chart vm-namespaces", map[string]any{"fix": fix, "metadata": map[string]any{"vmNamespaces": []any{"vms", "tenant-b"}}}},
		{"chart all", map[string]any{"fix": fix, "nri": nri, "serviceMonitor": sm, "sizer": map[string]any{"enabled": true}}},
	} {
		out = append(out, config{c.name, helm(t, c.vals)})
	}
	return out
}

// podSpecs are the pod templates of a configuration's workloads, by
// workload.
func podSpecs(objs []object) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		if o["kind"] != "DaemonSet" && o["kind"] != "Deployment" {
			continue
		}
		out[o.key()] = o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	}
	return out
}

func containers(spec map[string]any) []map[string]any {
	var out []map[string]any
	for _, c := range spec["containers"].([]any) {
		out = append(out, c.(map[string]any))
	}
	return out
}

func strs(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, a := range l {
		out = append(out, fmt.Sprint(a))
	}
	return out
}

// listenPorts are the ports a container binds: its containerPorts and
// hostPorts, and the port of every --*listen=ADDR argument.
func listenPorts(t *testing.T, c map[string]any) []int {
	t.Helper()
	var out []int
	ports, _ := c["ports"].([]any)
	for _, p := range ports {
		pm := p.(map[string]any)
		for _, k := range []string{"containerPort", "hostPort"} {
			if v, ok := pm[k]; ok {
				out = append(out, int(v.(float64)))
			}
		}
	}
	for _, a := range strs(c["args"]) {
		flag, val, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(flag, "--") || !strings.HasSuffix(flag, "listen") {
			continue
		}
		_, port, err := net.SplitHostPort(val)
		if err != nil {
			t.Errorf("container %s: %s: %v", c["name"], a, err)
			continue
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			t.Errorf("container %s: %s: port %q", c["name"], a, port)
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// On the host network the containers of a pod share the node's ports: two
// of them on one port and one fails to bind on every node (the nri
// container's --listen and the agent's --local-listen were both 9531).
func TestNoHostPortSharedInAPod(t *testing.T) {
	for _, cfg := range configurations(t) {
		for wl, spec := range podSpecs(cfg.objs) {
			if spec["hostNetwork"] != true {
				continue
			}
			owner := map[int]string{}
			for _, c := range containers(spec) {
				for _, p := range listenPorts(t, c) {
					if other, ok := owner[p]; ok {
						t.Errorf("%s, %s: containers %s and %s both bind host port %d", cfg.name, wl, other, c["name"], p)
					}
					owner[p] = c["name"].(string)
				}
			}
			if len(owner) == 0 {
				t.Errorf("%s, %s: no port found: the parser missed the arguments", cfg.name, wl)
			}
		}
	}
}

// The check itself: the two colliding arguments of the old nri overlay
// are found.
func TestListenPortsSeesTheOldCollision(t *testing.T) {
	agent := map[string]any{"name": "cgwarden", "args": []any{"serve", "--listen=0.0.0.0:9530", "--local-listen=127.0.0.1:9531"},
		"ports": []any{map[string]any{"containerPort": float64(9530)}}}
	nri := map[string]any{"name": "nri", "args": []any{"nri", "--listen=127.0.0.1:9531"}}
	a, n := listenPorts(t, agent), listenPorts(t, nri)
	if !reflect.DeepEqual(a, []int{9530, 9531}) || !reflect.DeepEqual(n, []int{9531}) {
		t.Errorf("ports %v and %v, want [9530 9531] and [9531]", a, n)
	}
}

// agentOf is the agent container and the pod spec of a configuration.
func agentOf(t *testing.T, cfg config) (spec, agent map[string]any) {
	t.Helper()
	for _, o := range cfg.objs {
		if o["kind"] == "DaemonSet" {
			spec = o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			return spec, containers(spec)[0]
		}
	}
	t.Fatalf("%s: no DaemonSet", cfg.name)
	return nil, nil
}

func mounts(c map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	l, _ := c["volumeMounts"].([]any)
	for _, m := range l {
		mm := m.(map[string]any)
		out[mm["mountPath"].(string)] = mm
	}
	return out
}

func hostPaths(spec map[string]any) map[string]string {
	out := map[string]string{}
	for _, v := range spec["volumes"].([]any) {
		vm := v.(map[string]any)
		if hp, ok := vm["hostPath"].(map[string]any); ok {
			out[vm["name"].(string)] = hp["path"].(string)
		}
	}
	return out
}

// checkLocked: the pod has the runtime's seccomp profile; the container no
// capability, no privilege escalation, a read-only root.
func checkLocked(t *testing.T, what string, spec, c map[string]any) {
	t.Helper()
	checkLockedAdding(t, what, spec, c, nil)
}

// checkLockedAdding is checkLocked for a container that adds exactly the
// capabilities add (none: nil).
func checkLockedAdding(t *testing.T, what string, spec, c map[string]any, add []string) {
	t.Helper()
	psc, _ := spec["securityContext"].(map[string]any)
	csc, _ := c["securityContext"].(map[string]any)
	if sp, _ := psc["seccompProfile"].(map[string]any); sp["type"] != "RuntimeDefault" {
		t.Errorf("%s: pod seccompProfile %v, want RuntimeDefault", what, psc["seccompProfile"])
	}
	caps, _ := csc["capabilities"].(map[string]any)
	if !reflect.DeepEqual(strs(caps["drop"]), []string{"ALL"}) || !reflect.DeepEqual(strs(caps["add"]), add) {
		t.Errorf("%s: capabilities %v, want drop [ALL] and added %v", what, caps, add)
	}
	if csc["allowPrivilegeEscalation"] != false || csc["readOnlyRootFilesystem"] != true || csc["privileged"] == true {
		t.Errorf("%s: securityContext %v", what, csc)
	}
}

// agentUID is the observe-only agent's user and group in every
// configuration: one that no common image or daemon uses.
const agentUID = 64720

// Observe-only: a non-root user without capabilities, every host path
// mounted read-only and recursively so, no runtime socket, no journal.
func TestObserveOnlyHoldsNothingToWrite(t *testing.T) {
	for _, cfg := range configurations(t) {
		if !slices.Contains([]string{"kustomize base", "kustomize nri", "chart defaults", "chart nri", "chart auth off"}, cfg.name) {
			continue
		}
		spec, c := agentOf(t, cfg)
		what := cfg.name + ", agent"
		checkLocked(t, what, spec, c)
		csc := c["securityContext"].(map[string]any)
		if csc["runAsNonRoot"] != true || csc["runAsUser"] == float64(0) {
			t.Errorf("%s: runs as %v (runAsNonRoot %v), want a non-root user", what, csc["runAsUser"], csc["runAsNonRoot"])
		}
		// A user of its own: on the host's network, its SO_REUSEPORT
		// listeners share the port with any socket of the same user.
		if csc["runAsUser"] != float64(agentUID) || csc["runAsGroup"] != float64(agentUID) {
			t.Errorf("%s: runs as user %v group %v, want the agent's own %d (not a shared one such as nobody's 65534 or distroless's 65532)",
				what, csc["runAsUser"], csc["runAsGroup"], agentUID)
		}
		hp := hostPaths(spec)
		ms := mounts(c)
		for _, m := range ms {
			if _, ok := hp[m["name"].(string)]; !ok {
				continue
			}
			if m["readOnly"] != true || m["recursiveReadOnly"] != "Enabled" {
				t.Errorf("%s: host path %s mounted at %s readOnly %v recursiveReadOnly %v", what, hp[m["name"].(string)], m["mountPath"], m["readOnly"], m["recursiveReadOnly"])
			}
			if p := hp[m["name"].(string)]; strings.Contains(p, "containerd") || strings.Contains(p, "crio") || p == "/var/lib/cgwarden" {
				t.Errorf("%s: mounts %s", what, p)
			}
		}
		for _, want := range []string{"/host/sys/fs/cgroup", "/host/proc", "/host/sys/devices/system/cpu"} {
			if _, ok := ms[want]; !ok {
				t.Errorf("%s: %s not mounted", what, want)
			}
		}
		for _, a := range strs(c["args"]) {
			if strings.HasPrefix(a, "--journal-dir") || strings.HasPrefix(a, "--fix") || a == "--metadata=cri" {
				t.Errorf("%s: argument %s", what, a)
			}
		}
	}
}

// Fix mode adds to observe-only exactly: root (still no capability), the
// cgroup tree writable, the journal on the host; nothing else changes.
func TestFixAddsOnlyWhatFixingNeeds(t *testing.T) {
	byName := map[string]config{}
	for _, cfg := range configurations(t) {
		byName[cfg.name] = cfg
	}
	for _, pair := range [][2]string{{"kustomize base", "kustomize fix"}, {"chart defaults", "chart fix"}} {
		oSpec, o := agentOf(t, byName[pair[0]])
		fSpec, f := agentOf(t, byName[pair[1]])
		what := pair[1] + ", agent"
		// DAC_OVERRIDE alone: on cgroup v2 the runtime's emptied cgroup
		// at the hierarchy's root (0555) is removed after adoption, or a
		// containerd restart starts the adopted container again (the
		// lane's TestV2NodeSeedsBeforeAndAfter fails without it).
		checkLockedAdding(t, what, fSpec, f, []string{"DAC_OVERRIDE"})
		fsc := f["securityContext"].(map[string]any)
		if fsc["runAsUser"] != float64(0) {
			t.Errorf("%s: runAsUser %v, want 0 (cgroup files are root's)", what, fsc["runAsUser"])
		}
		om, fm := mounts(o), mounts(f)
		for path, m := range fm {
			was, ok := om[path]
			switch {
			case path == "/host/sys/fs/cgroup":
				if m["readOnly"] != false {
					t.Errorf("%s: the cgroup tree is not writable: %v", what, m)
				}
			case path == "/var/lib/cgwarden":
				if ok {
					t.Errorf("%s: observe-only already mounts the journal", pair[0])
				}
			case path == "/host/run/dbus":
				// systemd's bus: on a systemd cgroup v2 node a move into
				// a pod is systemd's to make (the lane's
				// TestV2NodeSeedsBeforeAndAfter fails without it); read-only.
				if ok || m["readOnly"] != true {
					t.Errorf("%s: the bus's directory: %v (observe-only: %v), want it read-only and in fix mode only", what, m, was)
				}
			case !ok || !reflect.DeepEqual(was, m):
				t.Errorf("%s: mount %s is %v, observe-only has %v", what, path, m, was)
			}
		}
		if len(fm) != len(om)+2 {
			t.Errorf("%s: %d mounts, observe-only %d: want the journal and the bus added only", what, len(fm), len(om))
		}
		added := map[string]string{}
		for n, p := range hostPaths(fSpec) {
			if _, ok := hostPaths(oSpec)[n]; !ok {
				added[n] = p
			}
		}
		if !reflect.DeepEqual(added, map[string]string{"journal": "/var/lib/cgwarden", "dbus": "/run/dbus"}) {
			t.Errorf("%s: host paths added %v, want the journal and the bus's directory only", what, added)
		}
		var extra []string
		for _, a := range strs(f["args"]) {
			if !slices.Contains(strs(o["args"]), a) {
				extra = append(extra, a)
			}
		}
		if len(extra) != 2 || extra[0] != "--journal-dir=/var/lib/cgwarden" || !strings.HasPrefix(extra[1], "--fix=") {
			t.Errorf("%s: arguments added %v, want --journal-dir and --fix", what, extra)
		}
	}
}

// On a cgroup v1 node (components/cgroup-v1, chart fix.cgroupV1) the
// fixing agent's cgroup tree is read-only again, recursively, and only the
// hierarchies it writes are writable above it: cpu, cpuacct, memory and
// pids, each from the host's same path, which must exist. Every other
// mount is fix mode's. The lane's TestFixAgentWritesOnlyItsHierarchies
// shows the kernel refusing the rest.
func TestCgroupV1WritesOnlyItsHierarchies(t *testing.T) {
	byName := map[string]config{}
	for _, cfg := range configurations(t) {
		byName[cfg.name] = cfg
	}
	writable := map[string]string{"cgroup-cpu": "cpu", "cgroup-cpuacct": "cpuacct", "cgroup-memory": "memory", "cgroup-pids": "pids"}
	for _, pair := range [][2]string{{"kustomize fix", "kustomize fix-cgroup-v1"}, {"chart fix", "chart fix cgroup v1"}} {
		fSpec, f := agentOf(t, byName[pair[0]])
		vSpec, v := agentOf(t, byName[pair[1]])
		fm, vm := mounts(f), mounts(v)
		tree := vm["/host/sys/fs/cgroup"]
		if tree["readOnly"] != true || tree["recursiveReadOnly"] != "Enabled" {
			t.Errorf("%s: the cgroup tree is mounted %v, want recursively read-only", pair[1], tree)
		}
		paths := hostPaths(vSpec)
		var rw []string
		for path, m := range vm {
			if m["readOnly"] == true {
				continue
			}
			name, _ := m["name"].(string)
			if name == "journal" {
				continue
			}
			rw = append(rw, name)
			h, ok := writable[name]
			if !ok || path != "/host/sys/fs/cgroup/"+h || paths[name] != "/sys/fs/cgroup/"+h {
				t.Errorf("%s: %s mounted writable at %s from %s", pair[1], name, path, paths[name])
			}
		}
		if len(rw) != len(writable) {
			t.Errorf("%s: writable mounts %v, want the journal and %v", pair[1], rw, writable)
		}
		for _, vol := range vSpec["volumes"].([]any) {
			vol := vol.(map[string]any)
			if _, ok := writable[vol["name"].(string)]; ok && vol["hostPath"].(map[string]any)["type"] != "Directory" {
				t.Errorf("%s: volume %v may be created on the host (a mkdir in a cgroup tree makes a cgroup)", pair[1], vol)
			}
		}
		for path, m := range fm {
			if path != "/host/sys/fs/cgroup" && !reflect.DeepEqual(vm[path], m) {
				t.Errorf("%s: mount %s is %v, fix mode's is %v", pair[1], path, vm[path], m)
			}
		}
		if len(vm) != len(fm)+len(writable) || len(hostPaths(fSpec))+len(writable) != len(paths) {
			t.Errorf("%s: %d mounts and %d host paths, fix mode %d and %d: want the four hierarchies added only", pair[1], len(vm), len(paths), len(fm), len(hostPaths(fSpec)))
		}
		if !reflect.DeepEqual(v["args"], f["args"]) || !reflect.DeepEqual(v["securityContext"], f["securityContext"]) {
			t.Errorf("%s: arguments or securityContext differ from fix mode's", pair[1])
		}
	}
}

// The nri container: root for the root-owned socket, WAKE_ALARM alone
// (TestAgentCannotReachTheNRIContainer), the socket's directory and the
// learned handlers (read-only), nothing else.
func TestNRIContainerHoldsOnlyItsSocket(t *testing.T) {
	for _, cfg := range configurations(t) {
		spec, ok := podSpecs(cfg.objs)["DaemonSet/cgwarden-system/cgwarden"]
		if !ok || len(containers(spec)) < 2 {
			continue
		}
		c := containers(spec)[1]
		what := cfg.name + ", nri"
		checkLockedAdding(t, what, spec, c, []string{"WAKE_ALARM"})
		ms := mounts(c)
		want := map[string]bool{"/var/run/nri": false, "/var/lib/cgwarden": true}
		if len(ms) != len(want) {
			t.Errorf("%s: mounts %v, want only %v", what, ms, want)
		}
		for path, ro := range want {
			m, ok := ms[path]
			if !ok || (m["readOnly"] == true) != ro {
				t.Errorf("%s: mount %s: %v, want readOnly %v", what, path, m, ro)
			}
		}
	}
}

// The fixing agent (uid 0, host PID namespace, no capability) must not
// open /proc/<pid>/root of the nri container beside it (also uid 0),
// whose NRI socket is root on the node. The kernel lets a process of the
// same uid do so unless the target's permitted capabilities are not a
// subset of the caller's (security/commoncap.c, cap_ptrace_access_check;
// measured on this machine's kernel with setpriv: a uid-0 process with no
// capability opens /proc/<pid>/root and environ of a uid-0 process with
// none, and is refused them of one holding CAP_WAKE_ALARM). So wherever
// both run as the same user, the nri container holds a capability the
// agent does not. The lane's TestAgentCannotReachTheNRIContainer checks
// it on the running pod.
func TestAgentCannotReachTheNRIContainer(t *testing.T) {
	seen := 0
	for _, cfg := range configurations(t) {
		spec, ok := podSpecs(cfg.objs)["DaemonSet/cgwarden-system/cgwarden"]
		if !ok || len(containers(spec)) < 2 {
			continue
		}
		seen++
		agent, nri := containers(spec)[0], containers(spec)[1]
		asc, _ := agent["securityContext"].(map[string]any)
		nsc, _ := nri["securityContext"].(map[string]any)
		if asc["runAsUser"] != nsc["runAsUser"] {
			continue // another user: the kernel refuses the agent anyway
		}
		acaps, _ := asc["capabilities"].(map[string]any)
		ncaps, _ := nsc["capabilities"].(map[string]any)
		lacks := false
		for _, c := range strs(ncaps["add"]) {
			lacks = lacks || !slices.Contains(strs(acaps["add"]), c)
		}
		if !lacks {
			t.Errorf("%s: the agent (uid %v, adds %v) and the nri container (uid %v, adds %v): the nri container holds no capability the agent lacks, so the agent can open its /proc/<pid>/root",
				cfg.name, asc["runAsUser"], acaps["add"], nsc["runAsUser"], ncaps["add"])
		}
	}
	if seen == 0 {
		t.Fatal("no configuration with an nri container")
	}
}

// The CRI socket only with metadata.source=cri: then root (the socket is
// root's) and the socket's directory.
func TestCRISocketOnlyWhenAsked(t *testing.T) {
	for _, cfg := range configurations(t) {
		if _, ok := podSpecs(cfg.objs)["DaemonSet/cgwarden-system/cgwarden"]; !ok {
			continue // the ServiceMonitor, the sizer
		}
		_, c := agentOf(t, cfg)
		_, hasCRI := mounts(c)["/host/run/containerd"]
		asked := slices.Contains(strs(c["args"]), "--metadata=cri")
		if hasCRI != asked {
			t.Errorf("%s: CRI socket mounted %v, --metadata=cri %v", cfg.name, hasCRI, asked)
		}
		if asked && c["securityContext"].(map[string]any)["runAsUser"] != float64(0) {
			t.Errorf("%s: --metadata=cri as a non-root user cannot connect to the root-owned socket", cfg.name)
		}
	}
}

// rule is one RBAC rule, flattened for comparison.
type rule struct {
	groups, resources, names, verbs string
}

func rulesOf(o object) []rule {
	var out []rule
	for _, r := range o["rules"].([]any) {
		rm := r.(map[string]any)
		out = append(out, rule{strings.Join(strs(rm["apiGroups"]), ","), strings.Join(strs(rm["resources"]), ","),
			strings.Join(strs(rm["resourceNames"]), ","), strings.Join(strs(rm["verbs"]), ",")})
	}
	return out
}

// nodeScopedAgent is the agent's ClusterRole with node-scoped pod reads
// (deploy/kustomize/components/node-scoped, chart metadata.nodeScoped):
// no pod listed or watched as itself, only as the node its pod runs on.
var nodeScopedAgent = slices.Concat(
	[]rule{{"", "pods", "", "impersonate-on:associated-node:list,impersonate-on:associated-node:watch"}},
	agentRules[1:],
	[]rule{
		{"authentication.k8s.io", "nodes", "", "impersonate:associated-node"},
		{"", "nodes", "", "impersonate-on:associated-node:list,impersonate-on:associated-node:watch"},
	})

// vmNamespacesAgent is the agent's ClusterRole when it reads the VMs of
// named namespaces only (deploy/kustomize/components/vm-namespaces, chart
// metadata.vmNamespaces): no VM rule; a Role per namespace has them
// (vmRole).
var vmNamespacesAgent = slices.Concat(agentRules[:1], agentRules[3:])

// vmRole is the Role cgwarden-vms of each namespace whose VMs the agent
// reads.
var vmRole = []rule{
	{"vm.neon.tech", "virtualmachines", "", "list,watch"},
	{"kubevirt.io", "virtualmachineinstances", "", "list,watch"},
}

// agentRules is the agent's ClusterRole as the base installs it.
var agentRules = []rule{
	{"", "pods", "", "list,watch"},
	{"vm.neon.tech", "virtualmachines", "", "list,watch"},
	{"kubevirt.io", "virtualmachineinstances", "", "list,watch"},
	{"", "events", "", "create,patch"},
	{"authentication.k8s.io", "tokenreviews", "", "create"},
	{"authorization.k8s.io", "subjectaccessreviews", "", "create"},
}

// Every rule of every role, pinned: each is justified in docs/deploy.md by
// the call that needs it ("Permissions, by the call that needs them"); a
// rule added here must be added there. No pods patch for the sizer (only
// pods/resize) and nothing on its webhook configuration; nothing
// cluster-wide to write for the agent but Events.
func TestRBACRulesArePinned(t *testing.T) {
	want := map[string][]rule{
		"ClusterRole//cgwarden": agentRules,
		// The agent signs its loopback listener's answers with tokens of
		// its own ServiceAccount (answerproof; the policy
		// cgwarden-answer-tokens limits them to answer tokens).
		"Role/cgwarden-system/cgwarden": {
			{"", "serviceaccounts/token", "cgwarden", "create"},
		},
		// For kubectl cgwarden's users, bound by the administrator: the
		// agents' pods, port-forwards to them, the reader's tokens, and
		// TokenReviews of the agents' answer tokens.
		"Role/cgwarden-system/cgwarden-plugin-user": {
			{"", "pods", "", "list"},
			{"", "pods/portforward", "", "get,create"},
			{"", "serviceaccounts/token", "cgwarden-reader", "create"},
		},
		"ClusterRole//cgwarden-plugin-user": {
			{"authentication.k8s.io", "tokenreviews", "", "create"},
		},
		// With the size policy (deploy/kustomize/size-policy): the
		// agent's watches of the policy, its binding (by name) and its
		// own Node (field selector; RBAC cannot name a node per agent).
		"ClusterRole//cgwarden-size-trust": {
			{"admissionregistration.k8s.io", "validatingadmissionpolicies,validatingadmissionpolicybindings", "cgwarden-size-annotation", "list,watch"},
			{"", "nodes", "", "list,watch"},
		},
		"ClusterRole//cgwarden-sizer": {
			{"", "pods", "", "list,watch"},
			{"", "pods/resize", "", "patch"},
			{"vm.neon.tech", "virtualmachines", "", "get,list,watch"},
			{"", "nodes", "", "list,watch"},
			{"", "events", "", "create,patch"},
		},
		// Get of its CA Secret only: it signs its serving certificates
		// in memory and writes no Secret; nothing on any webhook
		// configuration (TestSizerHoldsNothingOnWebhookConfigurations).
		"Role/cgwarden-sizer/cgwarden-sizer": {
			{"", "secrets", "cgwarden-sizer-ca", "get"},
			{"coordination.k8s.io", "leases", "cgwarden-sizer", "get,update"},
			{"coordination.k8s.io", "leases", "", "create"},
		},
	}
	for _, cfg := range configurations(t) {
		for _, o := range cfg.objs {
			if o["kind"] != "ClusterRole" && o["kind"] != "Role" {
				continue
			}
			md := o["metadata"].(map[string]any)
			ns, _ := md["namespace"].(string)
			key := fmt.Sprintf("%s/%s/%s", o["kind"], ns, md["name"])
			w, ok := want[key]
			switch {
			case key == "ClusterRole//cgwarden" && strings.Contains(cfg.name, "node-scoped"):
				w = nodeScopedAgent
			case key == "ClusterRole//cgwarden" && strings.Contains(cfg.name, "vm-namespaces"):
				w = vmNamespacesAgent
			case o["kind"] == "Role" && md["name"] == "cgwarden-vms" && strings.Contains(cfg.name, "vm-namespaces"):
				w, ok = vmRole, true
			}
			if !ok {
				t.Errorf("%s: role %s is not pinned here", cfg.name, key)
				continue
			}
			if got := rulesOf(o); !reflect.DeepEqual(got, w) {
				t.Errorf("%s: %s rules\n%v\nwant\n%v", cfg.name, key, got, w)
			}
		}
	}
}

// The sizer: a namespace of its own enforcing Pod Security restricted,
// a pod that meets it, a PodDisruptionBudget, and nothing of it in the
// agent's privileged namespace.
func TestSizerRunsRestricted(t *testing.T) {
	for _, cfg := range configurations(t) {
		var ns, pdb, dep object
		for _, o := range cfg.objs {
			md := o["metadata"].(map[string]any)
			labels, _ := md["labels"].(map[string]any)
			if labels["app.kubernetes.io/name"] != "cgwarden-sizer" {
				continue
			}
			switch o["kind"] {
			case "Namespace":
				ns = o
			case "PodDisruptionBudget":
				pdb = o
			case "Deployment":
				dep = o
			}
			if md["namespace"] == "cgwarden-system" {
				t.Errorf("%s: %s in the agent's namespace", cfg.name, o.key())
			}
		}
		if dep == nil {
			continue
		}
		if ns == nil || pdb == nil {
			t.Fatalf("%s: sizer without its Namespace (%v) or PodDisruptionBudget (%v)", cfg.name, ns != nil, pdb != nil)
		}
		labels := ns["metadata"].(map[string]any)["labels"].(map[string]any)
		if labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Errorf("%s: sizer namespace labels %v, want enforce: restricted", cfg.name, labels)
		}
		if ms := pdb["spec"].(map[string]any)["minAvailable"]; ms != float64(1) {
			t.Errorf("%s: PodDisruptionBudget minAvailable %v, want 1", cfg.name, ms)
		}
		spec := dep["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		c := containers(spec)[0]
		checkLocked(t, cfg.name+", sizer", spec, c)
		if spec["securityContext"].(map[string]any)["runAsNonRoot"] != true || c["securityContext"].(map[string]any)["runAsNonRoot"] != true {
			t.Errorf("%s: sizer not runAsNonRoot", cfg.name)
		}
		if spec["hostNetwork"] == true || spec["hostPID"] == true || spec["volumes"] != nil {
			t.Errorf("%s: sizer pod holds host namespaces or volumes", cfg.name)
		}
	}
}

// Plain HTTP only on loopback unless said: with auth off the chart
// passes --allow-remote only with listen.allowRemoteWithoutAuth, and
// refuses a non-loopback address without it.
func TestChartAuthOffStaysOnLoopback(t *testing.T) {
	off := map[string]any{"enabled": false}
	if _, err := helmRender(t, map[string]any{"auth": off}); err == nil || !strings.Contains(err.Error(), "allowRemoteWithoutAuth") {
		t.Errorf("auth off on 0.0.0.0: %v, want a refusal naming listen.allowRemoteWithoutAuth", err)
	}
	for _, c := range []struct {
		listen map[string]any
		remote bool
	}{
		{map[string]any{"address": "127.0.0.1"}, false},
		{map[string]any{"allowRemoteWithoutAuth": true}, true},
	} {
		_, agent := agentOf(t, config{"auth off", helm(t, map[string]any{"auth": off, "listen": c.listen})})
		if got := slices.Contains(strs(agent["args"]), "--allow-remote"); got != c.remote {
			t.Errorf("auth off, listen %v: --allow-remote %v, want %v", c.listen, got, c.remote)
		}
	}
}

// The ServiceMonitor verifies the agent when a CA is given; skipping
// verification is an explicit choice; neither is a refusal to render.
func TestServiceMonitorVerifiesTheAgent(t *testing.T) {
	if _, err := helmRender(t, map[string]any{"serviceMonitor": map[string]any{"enabled": true}}); err == nil || !strings.Contains(err.Error(), "caSecret") {
		t.Errorf("ServiceMonitor without a CA: %v, want a refusal naming tls.caSecret", err)
	}
	for _, c := range []struct {
		tls      map[string]any
		insecure bool
	}{
		{map[string]any{"caSecret": map[string]any{"name": "ca"}, "serverName": "cgwarden.cgwarden-system.svc"}, false},
		{map[string]any{"insecureSkipVerify": true}, true},
	} {
		for _, o := range helm(t, map[string]any{"serviceMonitor": map[string]any{"enabled": true, "tls": c.tls}}) {
			if o["kind"] != "ServiceMonitor" {
				continue
			}
			y, _ := yaml.Marshal(o)
			if got := strings.Contains(string(y), "insecureSkipVerify: true"); got != c.insecure {
				t.Errorf("tls %v: insecureSkipVerify %v, want %v:\n%s", c.tls, got, c.insecure, y)
			}
			if !c.insecure && (!strings.Contains(string(y), "serverName: cgwarden.cgwarden-system.svc") || !strings.Contains(string(y), "name: ca")) {
				t.Errorf("tls %v: no CA or serverName:\n%s", c.tls, y)
			}
		}
	}
	for _, o := range kustomize(t, "servicemonitor") {
		if y, _ := yaml.Marshal(o); strings.Contains(string(y), "insecureSkipVerify") {
			t.Errorf("deploy/kustomize/servicemonitor skips verification:\n%s", y)
		}
	}
}

// TestVMReadsByNamespace: with metadata.vmNamespaces the agent's identity
// may read the VMs of the named namespaces only: a Role and a RoleBinding
// to the agent's ServiceAccount in each, and no VM rule in its
// ClusterRole; without it, the ClusterRole's rules and no such Role.
func TestVMReadsByNamespace(t *testing.T) {
	vmRoles := func(objs []object) (roles, bindings []string, clusterWide bool) {
		for _, o := range objs {
			md := o["metadata"].(map[string]any)
			switch {
			case o["kind"] == "Role" && md["name"] == "cgwarden-vms":
				roles = append(roles, md["namespace"].(string))
			case o["kind"] == "RoleBinding" && md["name"] == "cgwarden-vms":
				subj := o["subjects"].([]any)[0].(map[string]any)
				ref := o["roleRef"].(map[string]any)
				if subj["kind"] != "ServiceAccount" || subj["name"] != "cgwarden" || subj["namespace"] != "cgwarden-system" || ref["kind"] != "Role" || ref["name"] != "cgwarden-vms" {
					t.Errorf("RoleBinding %s/cgwarden-vms binds %v to %v, want Role cgwarden-vms to ServiceAccount cgwarden-system/cgwarden", md["namespace"], ref, subj)
				}
				bindings = append(bindings, md["namespace"].(string))
			case o["kind"] == "ClusterRole" && md["name"] == "cgwarden":
				for _, r := range rulesOf(o) {
					clusterWide = clusterWide || r.groups == "vm.neon.tech" || r.groups == "kubevirt.io"
				}
			}
		}
		slices.Sort(roles)
		slices.Sort(bindings)
		return roles, bindings, clusterWide
	}
	roles, bindings, clusterWide := vmRoles(helm(t, map[string]any{"metadata": map[string]any{"vmNamespaces": []any{"vms", "tenant-b"}}}))
	if want := []string{"tenant-b", "vms"}; !slices.Equal(roles, want) || !slices.Equal(bindings, want) || clusterWide {
		t.Errorf("chart with vmNamespaces [vms tenant-b]: Roles in %v, RoleBindings in %v, ClusterRole VM rules %v; want Roles and RoleBindings in %v, no ClusterRole VM rule", roles, bindings, clusterWide, want)
	}
	roles, bindings, clusterWide = vmRoles(helm(t, nil))
	if len(roles)+len(bindings) > 0 || !clusterWide {
		t.Errorf("chart defaults: Roles in %v, RoleBindings in %v, ClusterRole VM rules %v; want the ClusterRole's alone", roles, bindings, clusterWide)
	}
}
