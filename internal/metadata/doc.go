// Package metadata gives cgwarden what the cgroups cannot tell: pod names
// and namespaces, container names and start times, CPU requests and limits,
// and the real size of VM and sandbox pods (NeonVM VirtualMachines,
// KubeVirt VirtualMachineInstances, the cgwarden.io/cpu annotation).
//
// Sources are small: a Lookup answers by pod UID or container ID. This
// package reads the file forms (`kubectl get pods -A -o json`, `kubectl get
// virtualmachines.vm.neon.tech -A -o json`); the CRI and Kubernetes API
// sources live in their own packages and fill the same Pod type.
package metadata
