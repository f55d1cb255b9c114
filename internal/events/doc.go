// Package events tells Kubernetes what cgwarden found and did, as Events
// on the pods concerned (on the Node for what concerns no single pod), the
// way the kubelet reports its own: through client-go's event recorder,
// whose correlator aggregates repeats and rate-limits each object.
//
// A finding is reported when it first appears, not at every scan; one
// that goes away for ForgetAfter scans in a row and comes back is new
// again (one missed by a scan or two is the same). A finding is the same
// by what it is about — its pod's UID and its container's ID — not by the
// names or the cgroup a scan saw. A scan that brings many new
// findings at once (100 pods misplaced by a runtime) reports at most
// MaxPerScan of them and one Event on the Node for the rest, so the API
// server sees no storm.
package events
