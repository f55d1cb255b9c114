// Package lab is the cluster lane's machinery written in Go rather than
// in scripts/cluster's bash.
//
// Processes (procs.go): Lab.Start starts a daemon in a session of its
// own, its output appended to Dir/logs/NAME.log, records it in
// Dir/procs/NAME.json (command, environment, stop grace, readiness Probe,
// PID and start time) and waits until it is ready; Stop, StartAgain and
// Restart work from that record, so that a test restarts a component
// exactly as scripts/cluster started it. A record names its process by
// PID, start time and executable together: a PID reused by another
// process is not it.
//
// The node (node.go): PowerOff is a power cut (the kubelet, containerd,
// its shims and every container SIGKILLed, the runtime's state emptied,
// every pod cgroup removed), PowerOn the boot, Down the teardown in the
// order that leaves nothing behind.
//
// The PKI (pki.go): the cluster CA and the front-proxy CA, the
// certificates of the API server, the kubelet, the controllers and the
// admin (each a Kubernetes user with its groups), the service-account
// signing key, and the kubeconfig of each client, made with
// internal/certs (crypto/x509) and client-go's clientcmd.
//
// cmd/lab is its entry point for scripts/cluster and scripts/scale; the
// cluster lane's tests use the package directly.
package lab
