// Package events tells Kubernetes what cgwarden found and did, as Events
// on the pods concerned (on the Node for what concerns no single pod), the
// way the kubelet reports its own: through client-go's event recorder,
// whose correlator aggregates repeats and rate-limits each object.
//
// A finding is reported when it first appears, not at every scan; one
// that goes away and comes back is new again. A scan that brings many new
// findings at once (100 pods misplaced by a runtime) reports at most
// MaxPerScan of them and one Event on the Node for the rest, so the API
// server sees no storm.
package events
