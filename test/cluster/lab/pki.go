package lab

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cgwarden/cgwarden/internal/certs"
)

// Lifetime is how long the lane's certificates are valid: a lane that
// stays up longer is a forgotten one.
const Lifetime = 30 * 24 * time.Hour

// PKI is where and for what the lane's certificates are made.
type PKI struct {
	// Dir is the lane's state directory: the certificates and keys go to
	// Dir/pki, the kubeconfigs to Dir/<client>.kubeconfig.
	Dir string
	// Node is the node's name: the kubelet's user (system:node:<Node>)
	// and its serving certificate's host.
	Node string
	// Server is the API server's URL the kubeconfigs point at.
	Server string
}

// cert is one certificate of the lane, signed by ca ("ca" or
// "front-proxy-ca").
type cert struct {
	file, ca string
	sub      certs.Subject
}

// GuestNode is the name of the lane's second node, the systemd guest
// (scripts/vmtest --node with VMTEST_JOIN): an address, so that the API
// server and metrics-server dial it (its Hostname address, and the kubelet
// takes a name that is an IP address as its InternalIP too) at the host's
// loopback address where QEMU forwards its ports.
const GuestNode = "127.0.0.2"

// apiServerHosts are the names and addresses the API server answers to:
// the loopback and the kubernetes Service's names and ClusterIP.
var apiServerHosts = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local", "127.0.0.1", "10.96.0.1"}

// certificates are the lane's certificates for node.
func certificates(node string) []cert {
	masters := []string{"system:masters"}
	return []cert{
		{"apiserver", "ca", certs.Subject{Name: "kube-apiserver", Hosts: apiServerHosts, Client: true}},
		{"apiserver-kubelet-client", "ca", certs.Subject{Name: "kube-apiserver-kubelet-client", Groups: masters, Client: true}},
		{"admin", "ca", certs.Subject{Name: "cgwarden-admin", Groups: masters, Client: true}},
		{"controller-manager", "ca", certs.Subject{Name: "system:kube-controller-manager", Client: true}},
		{"scheduler", "ca", certs.Subject{Name: "system:kube-scheduler", Client: true}},
		{"kubelet", "ca", certs.Subject{Name: "system:node:" + node, Groups: []string{"system:nodes"}, Client: true}},
		{"kubelet-serving", "ca", certs.Subject{Name: node, Hosts: []string{node, "127.0.0.1"}, Client: true}},
		// The guest node's kubelet: its client and serving certificates
		// (WriteGuestKit puts them in the kit the guest boots with).
		{"guest-kubelet", "ca", certs.Subject{Name: "system:node:" + GuestNode, Groups: []string{"system:nodes"}, Client: true}},
		{"guest-kubelet-serving", "ca", certs.Subject{Name: GuestNode, Hosts: []string{GuestNode, "127.0.0.1"}, Client: true}},
		// metrics-server reads nodes and pods, the aggregation layer's
		// configuration, and scrapes the kubelet: an admin here.
		{"metrics-server", "ca", certs.Subject{Name: "cgwarden-metrics-server", Groups: masters, Client: true}},
		{"front-proxy-client", "front-proxy-ca", certs.Subject{Name: "front-proxy-client", Client: true}},
	}
}

// Clients are the lane's users with a kubeconfig of their own.
var Clients = []string{"admin", "controller-manager", "scheduler", "kubelet", "metrics-server"}

// Write makes the PKI at now: Dir/pki/{ca,front-proxy-ca}.crt, each
// certificate's .crt and .key, sa.key and sa.pub, and a kubeconfig per
// client. Dir/pki must not exist yet (a lane's PKI is made once per up).
// Keys are written 0600.
func (p PKI) Write(now time.Time) error {
	if p.Dir == "" || p.Node == "" || p.Server == "" {
		return errors.New("lab PKI: the directory, the node's name and the API server's URL are all needed")
	}
	dir := filepath.Join(p.Dir, "pki")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("lab PKI: %w", err)
	}
	cas := map[string]*certs.CA{}
	for name, cn := range map[string]string{"ca": "cgwarden-cluster-ca", "front-proxy-ca": "cgwarden-cluster-front-proxy-ca"} {
		ca, err := certs.NewCA(cn, now, Lifetime)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+".crt"), ca.PEM, 0o644); err != nil {
			return err
		}
		cas[name] = ca
	}
	for _, c := range certificates(p.Node) {
		pair, err := cas[c.ca].Issue(c.sub, now, Lifetime)
		if err != nil {
			return err
		}
		if err := writePair(dir, c.file, pair); err != nil {
			return err
		}
	}
	priv, pub, err := certs.SigningKey()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), priv, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.pub"), pub, 0o644); err != nil {
		return err
	}
	for _, c := range Clients {
		if err := p.kubeconfig(c); err != nil {
			return err
		}
	}
	return p.writeGuestKit()
}

// GuestKit is the directory, under the lane's, of what the guest node
// boots with (scripts/vmtest --node with VMTEST_JOIN set to it).
func GuestKit(dir string) string { return filepath.Join(dir, "guest") }

// writeGuestKit writes GuestKit(Dir): node-name; kubelet.kubeconfig (the
// guest's kubelet as system:node:<GuestNode>, everything inline, the API
// server at https://127.0.0.1:<port of Server> where the guest forwards
// its own loopback to the host's); kubelet.crt (its serving certificate
// and the lane's CA after it, where the kubelet looks for its own) and
// kubelet.key; ca.crt.
func (p PKI) writeGuestKit() error {
	pki, kit := filepath.Join(p.Dir, "pki"), GuestKit(p.Dir)
	if err := os.Mkdir(kit, 0o755); err != nil {
		return fmt.Errorf("lab guest kit: %w", err)
	}
	var readErr error
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(pki, name))
		if readErr == nil {
			readErr = err
		}
		return b
	}
	ca, cert, key := read("ca.crt"), read("guest-kubelet.crt"), read("guest-kubelet.key")
	serving, servingKey := read("guest-kubelet-serving.crt"), read("guest-kubelet-serving.key")
	if readErr != nil {
		return fmt.Errorf("lab guest kit: %w", readErr)
	}
	u, err := url.Parse(p.Server)
	if err != nil {
		return fmt.Errorf("lab guest kit: the API server's URL: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cgwarden"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:" + u.Port(), CertificateAuthorityData: ca}
	cfg.AuthInfos["kubelet"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["cgwarden"] = &clientcmdapi.Context{Cluster: "cgwarden", AuthInfo: "kubelet"}
	cfg.CurrentContext = "cgwarden"
	if err := clientcmd.WriteToFile(*cfg, filepath.Join(kit, "kubelet.kubeconfig")); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"node-name": []byte(GuestNode + "\n"), "ca.crt": ca,
		"kubelet.crt": append(append([]byte{}, serving...), ca...)} {
		if err := os.WriteFile(filepath.Join(kit, name), b, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(kit, "kubelet.key"), servingKey, 0o600)
}

// writePair writes name.crt and name.key (0600) in dir.
func writePair(dir, name string, pair certs.Pair) error {
	if err := os.WriteFile(filepath.Join(dir, name+".key"), pair.Key, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".crt"), pair.Cert, 0o644)
}

// kubeconfig writes Dir/<user>.kubeconfig: the API server at Server,
// trusted by the cluster CA, as user with its certificate.
func (p PKI) kubeconfig(user string) error {
	pki := filepath.Join(p.Dir, "pki")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cgwarden"] = &clientcmdapi.Cluster{Server: p.Server, CertificateAuthority: filepath.Join(pki, "ca.crt")}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificate: filepath.Join(pki, user+".crt"), ClientKey: filepath.Join(pki, user+".key")}
	cfg.Contexts["cgwarden"] = &clientcmdapi.Context{Cluster: "cgwarden", AuthInfo: user}
	cfg.CurrentContext = "cgwarden"
	return clientcmd.WriteToFile(*cfg, filepath.Join(p.Dir, user+".kubeconfig"))
}
