// Package certs makes and checks the X.509 certificates cgwarden serves
// with and the cluster lane's PKI: a CA and the certificates it signs (the
// sizer's webhook, the cluster lane's agent; the lane's API server,
// kubelet and clients, with their groups), a service-account signing
// key, a self-signed serving certificate (the agent
// without --tls-cert-file, as the kubelet does without one), and the check
// that a certificate still serves a set of hosts.
//
// Keys are ECDSA P-256; certificates and keys travel PEM-encoded
// ("CERTIFICATE", "EC PRIVATE KEY"), the form of a kubernetes.io/tls
// Secret and of --tls-cert-file/--tls-private-key-file. Time is passed in,
// so that expiry is tested without waiting. Built on crypto/x509 alone:
// client-go's util/cert makes only self-signed pairs with a fixed
// lifetime and the wall clock.
package certs
