package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Images are the lane's two images (test/cluster/images), imported into
// containerd at up; there is no registry.
const (
	PauseImage   = "cgwarden.local/pause:1"
	BusyboxImage = "cgwarden.local/busybox:1"
)

// Ports are the control plane's and the node's ports, all on 127.0.0.1.
type Ports struct {
	Etcd, EtcdPeer, APIServer, ControllerManager, Scheduler, Kubelet, KubeletHealthz, MetricsServer int
}

// DefaultPorts are the cluster lane's (the scale lane gives its control
// plane others, beside it).
var DefaultPorts = Ports{Etcd: 2379, EtcdPeer: 2380, APIServer: 6443, ControllerManager: 10257,
	Scheduler: 10259, Kubelet: 10250, KubeletHealthz: 10248, MetricsServer: 4443}

func (p Ports) all() []int {
	return []int{p.Etcd, p.EtcdPeer, p.APIServer, p.ControllerManager, p.Scheduler, p.Kubelet, p.KubeletHealthz, p.MetricsServer}
}

// Config is what Up needs: where scripts/cluster's build put the
// programs, and the node.
type Config struct {
	// Kubernetes holds kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubelet and kubectl; Etcd etcd; Containerd
	// containerd, its shim and ctr (scripts/cluster's one build puts all
	// of them in one directory).
	Kubernetes, Etcd, Containerd string
	// MetricsServer holds metrics-server, Images pause.tar and
	// busybox.tar, Misplace the misplace runtime.
	MetricsServer, Images, Misplace string
	// Runc is the runc both runtime handlers run.
	Runc string
	// Node is the node's name (its Hostname address, which the API
	// server and metrics-server dial).
	Node  string
	Ports Ports
}

// kubeletSysctls are the sysctls the kubelet sets (pkg/kubelet/cm
// setupKernelTunables): Down restores them.
var kubeletSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// hostPaths are paths outside Dir that the kubelet, containerd or
// mount(8) create: Down removes those that did not exist before up.
// /var/lib/kubelet is the device plugins' socket directory, hard-coded
// whatever --root-dir says; /run/mount is libmount's utab, written when
// the kubelet bind-mounts; /run/netns is where a pod without
// hostNetwork would get its network namespace.
var hostPaths = []string{"/var/log/containers", "/run/containerd", "/var/lib/kubelet", "/run/mount", "/run/netns"}

// Preflight says why a cluster cannot start here now: another
// containerd runs (its shims share /run/containerd/s with ours,
// hard-coded in containerd), a kubepods cgroup exists (another
// kubelet's: Down removes only what up made), or a port is taken.
func Preflight(ports Ports) error {
	var why []error
	if pids := processes(func(argv []string) bool { return filepath.Base(argv[0]) == "containerd" }); len(pids) > 0 {
		why = append(why, fmt.Errorf("a containerd runs already (pid %s); its shims share /run/containerd/s with ours (hard-coded in containerd)", strings.Trim(fmt.Sprint(pids), "[]")))
	}
	for _, h := range Hierarchies() {
		if _, err := os.Stat(filepath.Join(h, "kubepods")); err == nil {
			why = append(why, fmt.Errorf("%s/kubepods exists: another kubelet's? (down removes only the cgroups up made)", h))
		}
	}
	for _, p := range ports.all() {
		if p == 0 {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			why = append(why, fmt.Errorf("port %d is in use", p))
			continue
		}
		ln.Close()
	}
	return errors.Join(why...)
}

// recordHost writes what Down must restore or must not touch: the
// kubelet's sysctls as they are, the host paths that do not exist yet,
// the network namespaces and the misplace runtime's literal cgroups that
// are there already (not ours).
func (l Lab) recordHost() error {
	var b strings.Builder
	for _, s := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %s\n", s, strings.TrimSpace(string(v)))
	}
	var created []string
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err != nil {
			created = append(created, p)
		}
	}
	var netns []string
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			netns = append(netns, e.Name())
		}
	}
	state := filepath.Join(l.Dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	for name, lines := range map[string]string{
		"sysctls": b.String(),
		"created": lines(created),
		"netns":   lines(netns),
		"literal": lines(literalCgroups()),
	} {
		if err := os.WriteFile(filepath.Join(state, name), []byte(lines), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func lines(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return strings.Join(s, "\n") + "\n"
}

// ControlPlane starts etcd and the API server (the PKI made already) and
// waits until the API server is ready: the cluster lane's Up and the
// scale lane's control plane.
func (l Lab) ControlPlane(ctx context.Context, c Config) error {
	pki := filepath.Join(l.Dir, "pki")
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.Ports.EtcdPeer)
	client := fmt.Sprintf("http://127.0.0.1:%d", c.Ports.Etcd)
	if _, err := l.Start(ctx, Proc{Name: Etcd, Exe: filepath.Join(c.Etcd, "etcd"), Grace: 20 * time.Second,
		Args: []string{"--name", "cgwarden", "--data-dir", filepath.Join(l.Dir, "etcd"),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "cgwarden=" + peer, "--log-level", "warn"},
		Ready: Probe{HTTP: client + "/health"}}); err != nil {
		return err
	}
	f := func(name string) string { return filepath.Join(pki, name) }
	_, err := l.Start(ctx, Proc{Name: APIServer, Exe: filepath.Join(c.Kubernetes, "kube-apiserver"),
		// An outage test wants it gone: SIGKILL 5 s after SIGTERM.
		Grace: 5 * time.Second,
		Args: []string{"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", c.Ports.APIServer),
			"--etcd-servers=" + client,
			"--client-ca-file=" + f("ca.crt"), "--tls-cert-file=" + f("apiserver.crt"), "--tls-private-key-file=" + f("apiserver.key"),
			"--kubelet-client-certificate=" + f("apiserver-kubelet-client.crt"), "--kubelet-client-key=" + f("apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority=" + f("ca.crt"), "--kubelet-preferred-address-types=Hostname",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + f("sa.pub"), "--service-account-signing-key-file=" + f("sa.key"),
			"--service-cluster-ip-range=10.96.0.0/24", "--endpoint-reconciler-type=none",
			"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction", "--allow-privileged=true",
			"--requestheader-client-ca-file=" + f("front-proxy-ca.crt"), "--requestheader-allowed-names=front-proxy-client",
			"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file=" + f("front-proxy-client.crt"), "--proxy-client-key-file=" + f("front-proxy-client.key"),
			"--profiling=false"},
		Ready: Probe{Kubeconfig: l.Kubeconfig("admin"), Readyz: true, Timeout: 180 * time.Second}})
	return err
}

// Kubeconfig is the kubeconfig of the lab's client who (admin, kubelet,
// controller-manager, scheduler, metrics-server).
func (l Lab) Kubeconfig(who string) string { return filepath.Join(l.Dir, who+".kubeconfig") }

// Up starts the one-node cluster in Dir (which must not exist, or hold
// nothing that runs) and waits until the node is Ready and
// metrics.k8s.io answers: the host recorded for Down, the PKI, the
// configuration files, etcd, the API server, the controller-manager and
// the scheduler, containerd with the lane's images, the kubelet, the
// misplace RuntimeClass, metrics-server behind its APIService. A failure
// brings down what started (its logs copied to a /tmp directory it
// names).
func (l Lab) Up(ctx context.Context, c Config, logf func(string, ...any)) (err error) {
	if err := Preflight(c.Ports); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(l.Dir, "logs"), 0o755); err != nil {
		return err
	}
	defer func() {
		if err == nil {
			return
		}
		logs, _ := os.MkdirTemp("", "cgwarden-cluster-logs.")
		logf("up failed: bringing down what started (logs: %s)", logs)
		if derr := l.Down(context.Background(), logs, logf); derr != nil {
			logf("down: %v", derr)
		}
	}()
	if err := l.recordHost(); err != nil {
		return err
	}
	if err := (PKI{Dir: l.Dir, Node: c.Node, Server: fmt.Sprintf("https://127.0.0.1:%d", c.Ports.APIServer)}).Write(time.Now()); err != nil {
		return err
	}
	if err := l.writeConfigs(c); err != nil {
		return err
	}
	if err := l.ControlPlane(ctx, c); err != nil {
		return err
	}
	pki := filepath.Join(l.Dir, "pki")
	kcm, sched := l.Kubeconfig("controller-manager"), l.Kubeconfig("scheduler")
	for _, p := range []Proc{
		{Name: ControllerManager, Exe: filepath.Join(c.Kubernetes, "kube-controller-manager"), Grace: 20 * time.Second,
			Args: []string{"--kubeconfig=" + kcm, "--authentication-kubeconfig=" + kcm, "--authorization-kubeconfig=" + kcm,
				"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", c.Ports.ControllerManager), "--leader-elect=false",
				"--service-account-private-key-file=" + filepath.Join(pki, "sa.key"), "--root-ca-file=" + filepath.Join(pki, "ca.crt"),
				"--use-service-account-credentials=true", "--cluster-name=cgwarden", "--profiling=false"}},
		{Name: Scheduler, Exe: filepath.Join(c.Kubernetes, "kube-scheduler"), Grace: 20 * time.Second,
			Args: []string{"--kubeconfig=" + sched, "--authentication-kubeconfig=" + sched, "--authorization-kubeconfig=" + sched,
				"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", c.Ports.Scheduler), "--leader-elect=false", "--profiling=false"}},
		// containerd looks its shim up on PATH before beside itself:
		// ours first, so that a distribution's shim is never used. The
		// misplace wrapper runs the same runc as the default handler
		// (containerd's environment reaches its shims, and theirs runc).
		// As a service manager restarts it: SIGKILL 20 s after SIGTERM;
		// its shims, and so the containers, keep running.
		{Name: Containerd, Exe: filepath.Join(c.Containerd, "containerd"), Grace: 20 * time.Second,
			Args:  []string{"--config", filepath.Join(l.Dir, "containerd", "config.toml")},
			Env:   []string{"PATH=" + c.Containerd + ":" + os.Getenv("PATH"), "CGWARDEN_MISPLACE_RUNC=" + c.Runc},
			Ready: Probe{Exec: []string{filepath.Join(c.Containerd, "ctr"), "--address", l.containerdSocket(), "version"}}},
	} {
		if _, err := l.Start(ctx, p); err != nil {
			return err
		}
	}
	if err := l.linkDefaultSocket(); err != nil {
		return err
	}
	for _, img := range []string{"pause.tar", "busybox.tar"} {
		if _, err := l.ctr(ctx, "images", "import", "--platform", "linux/amd64", filepath.Join(c.Images, img)); err != nil {
			return fmt.Errorf("import %s: %w", img, err)
		}
	}
	out, err := l.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return err
	}
	for _, img := range []string{PauseImage, BusyboxImage} {
		if !slices.Contains(strings.Fields(out), img) {
			return fmt.Errorf("the image %s did not import (containerd has %q)", img, out)
		}
	}
	// A node restarted while Ready is still Ready in the API for a
	// while even if the new kubelet dies at once (its ContainerManager
	// failing): it must still run 2 s later.
	if _, err := l.Start(ctx, Proc{Name: Kubelet, Exe: filepath.Join(c.Kubernetes, "kubelet"), Grace: 20 * time.Second,
		Args: []string{"--config=" + filepath.Join(l.Dir, "kubelet", "config.yaml"), "--kubeconfig=" + l.Kubeconfig("kubelet"),
			"--root-dir=" + filepath.Join(l.Dir, "kubelet"), "--cert-dir=" + filepath.Join(l.Dir, "kubelet", "pki"), "--hostname-override=" + c.Node},
		Ready: Probe{HTTP: fmt.Sprintf("http://127.0.0.1:%d/healthz", c.Ports.KubeletHealthz), Kubeconfig: l.Kubeconfig("admin"),
			Node: c.Node, Settle: 2 * time.Second, Timeout: 180 * time.Second}}); err != nil {
		return err
	}
	return l.apiObjects(ctx, c)
}

// apiObjects waits for the default service account (pods are refused
// until the controller-manager made it), creates the misplace
// RuntimeClass, starts metrics-server and puts it behind its APIService.
func (l Lab) apiObjects(ctx context.Context, c Config) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig("admin"))
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := l.until(ctx, 60*time.Second, ControllerManager, "service account default/default", func() error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	// Pods choose the misplacing runtime by these RuntimeClasses.
	for _, name := range []string{"misplace", "misplace-usec"} {
		if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: name},
			metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	ms := l.Kubeconfig("metrics-server")
	if _, err := l.Start(ctx, Proc{Name: MetricsServer, Exe: filepath.Join(c.MetricsServer, "metrics-server"), Grace: 20 * time.Second,
		Args: []string{"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", c.Ports.MetricsServer), "--cert-dir=" + filepath.Join(l.Dir, "metrics-server"),
			"--kubeconfig=" + ms, "--authentication-kubeconfig=" + ms, "--authorization-kubeconfig=" + ms,
			"--kubelet-preferred-address-types=Hostname", "--kubelet-certificate-authority=" + filepath.Join(l.Dir, "pki", "ca.crt"),
			"--metric-resolution=15s"}}); err != nil {
		return err
	}
	// The aggregation layer reaches metrics-server through an
	// ExternalName Service "localhost": the API server resolves an
	// APIService's Service of that type to https://<externalName>:<port>
	// (no kube-proxy needed).
	if _, err := cs.CoreV1().Services("kube-system").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	apiservices := dyn.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"})
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1beta1.metrics.k8s.io"},
		"spec": map[string]any{"group": "metrics.k8s.io", "version": "v1beta1",
			"service":               map[string]any{"name": "metrics-server", "namespace": "kube-system", "port": int64(c.Ports.MetricsServer)},
			"insecureSkipTLSVerify": true, "groupPriorityMinimum": int64(100), "versionPriority": int64(100)},
	}}
	if _, err := apiservices.Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return l.until(ctx, 120*time.Second, MetricsServer, "APIService v1beta1.metrics.k8s.io Available", func() error {
		u, err := apiservices.Get(ctx, "v1beta1.metrics.k8s.io", metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Available" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", conds)
	})
}

// until polls f every 200 ms until it succeeds, failing early when the
// daemon proc (whose work it waits for) exits.
func (l Lab) until(ctx context.Context, timeout time.Duration, proc, what string, f func() error) error {
	end := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !l.Running(proc) {
			return fmt.Errorf("%s exited while waiting for %s%s", proc, what, l.tail(proc))
		}
		if time.Now().After(end) {
			return fmt.Errorf("%s: not within %v (last: %v)%s", what, timeout, err, l.tail(proc))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeConfigs writes containerd's and the kubelet's configuration and
// the CNI network (configs.go's templates).
func (l Lab) writeConfigs(c Config) error {
	for _, d := range []string{"cni/net.d", "containerd", "nri/plugins", "nri/conf.d", "kubelet", "pod-logs", "metrics-server"} {
		if err := os.MkdirAll(filepath.Join(l.Dir, d), 0o755); err != nil {
			return err
		}
	}
	files, err := l.configs(c, hasCapSysResource(), isCgroupV2())
	if err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(l.Dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// configs renders the configuration files, by their paths under Dir.
func (l Lab) configs(c Config, capSysResource, v2 bool) (map[string][]byte, error) {
	data := map[string]any{"D": l.Dir, "C": c, "Pause": PauseImage, "CapSysResource": capSysResource, "V2": v2,
		"Sock": l.containerdSocket()}
	out := map[string][]byte{}
	for name, t := range configTemplates {
		var b bytes.Buffer
		if err := t.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = b.Bytes()
	}
	return out, nil
}

// hasCapSysResource: can this process lower an oom_score_adj? Without
// CAP_SYS_RESOURCE (some sandboxed machines drop it, CI's among them)
// runc cannot give a pod sandbox the kubelet's -998 and every pod fails
// with "can't get final child's PID from pipe: EOF"; containerd's
// restrict_oom_score_adj then clamps pods' scores to containerd's own.
func hasCapSysResource() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && n&(1<<24) != 0
		}
	}
	return false
}

func isCgroupV2() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// Runc is the runc on PATH, or CGWARDEN_CLUSTER_RUNC.
func Runc() (string, error) {
	if r := os.Getenv("CGWARDEN_CLUSTER_RUNC"); r != "" {
		return r, nil
	}
	return exec.LookPath("runc")
}

var configTemplates = map[string]*template.Template{
	// containerd only reports the pod network ready once it has a CNI
	// network besides its built-in loopback; this one is loopback too,
	// and hostNetwork pods never use it.
	"cni/net.d/10-cgwarden-loopback.conflist": template.Must(template.New("").Parse(
		`{"cniVersion": "0.4.0", "name": "cgwarden-loopback", "plugins": [{"type": "loopback"}]}
`)),
	// containerd 2.x, config version 3. Nothing of /etc/containerd is
	// read. The opt plugin is disabled because it creates /opt/containerd.
	// NRI (on by default in 2.x) gets its socket, plugin and
	// plugin-config directories under Dir: its defaults (/var/run/nri,
	// /opt/nri/plugins, /etc/nri/conf.d) are outside what Down removes.
	// Besides runc, a second CRI runtime handler, "misplace": runc behind
	// test/cluster/misplace, which puts every app container's cgroup at
	// the root of each hierarchy (a pod annotated
	// cgwarden.io/misplace-sandbox: "true" has its sandbox misplaced too);
	// and a third, "misplace-usec": the same behind test/cluster/usecshim,
	// a shim that reports the containers' CPU in microseconds where
	// containerd reads nanoseconds, as seed 003's shim did.
	"containerd/config.toml": template.Must(template.New("").Parse(`version = 3
root = "{{.D}}/containerd/root"
state = "{{.D}}/containerd/state"
disabled_plugins = ["io.containerd.internal.v1.opt"]
[grpc]
  address = "{{.Sock}}"
[ttrpc]
  address = "{{.Sock}}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{{.D}}/nri/nri.sock"
  plugin_path = "{{.D}}/nri/plugins"
  plugin_config_path = "{{.D}}/nri/conf.d"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{{.Pause}}"
[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  restrict_oom_score_adj = {{not .CapSysResource}}
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{{.C.Runc}}"
        Root = "{{.D}}/runc"
        SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.misplace]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = ["cgwarden.io/misplace-sandbox"]
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.misplace.options]
        BinaryName = "{{.C.Misplace}}/misplace"
        Root = "{{.D}}/runc"
        SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.misplace-usec]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = "{{.C.Misplace}}/usec-shim"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.misplace-usec.options]
        BinaryName = "{{.C.Misplace}}/misplace"
        Root = "{{.D}}/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{{.D}}/cni/net.d"
`)),
	// cgroup v1 is deprecated; the kubelet refuses it unless told not to
	// (failCgroupV1). The machine is shared: evict and collect images
	// only when really short.
	"kubelet/config.yaml": template.Must(template.New("").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {{.C.Ports.Kubelet}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {{.C.Ports.KubeletHealthz}}
tlsCertFile: {{.D}}/pki/kubelet-serving.crt
tlsPrivateKeyFile: {{.D}}/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: {{.D}}/pki/ca.crt}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://{{.Sock}}
cgroupDriver: cgroupfs
cgroupsPerQOS: true
failCgroupV1: {{.V2}}
makeIPTablesUtilChains: false
failSwapOn: false
podLogsDir: {{.D}}/pod-logs
rotateCertificates: false
serverTLSBootstrap: false
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`)),
}
