package metadata

import (
	"strings"
	"testing"
)

// The kubelet weighs a pod cgroup by resource.PodRequests: the larger of
// the app containers' sum and the largest init container (sidecars, that
// is restartable init containers, add up and stay), plus overhead; a
// pod-level spec.resources request replaces the containers' sum. A pod
// whose only big request is an init container's must not read as a
// smaller pod, or tier-drift reports the kubelet's own value as drift.
func TestPodRequestsFollowTheKubelet(t *testing.T) {
	for name, tc := range map[string]struct {
		spec string
		want int64
	}{
		"containers only": {`"containers":[{"name":"a","resources":{"requests":{"cpu":"100m"}}},{"name":"b","resources":{"requests":{"cpu":"200m"}}}]`, 300},
		"init larger than containers": {`"initContainers":[{"name":"i","resources":{"requests":{"cpu":"2"}}}],
			"containers":[{"name":"a","resources":{"requests":{"cpu":"100m"}}}]`, 2000},
		"init smaller than containers": {`"initContainers":[{"name":"i","resources":{"requests":{"cpu":"50m"}}}],
			"containers":[{"name":"a","resources":{"requests":{"cpu":"100m"}}}]`, 100},
		"sidecar adds up": {`"initContainers":[{"name":"s","restartPolicy":"Always","resources":{"requests":{"cpu":"250m"}}}],
			"containers":[{"name":"a","resources":{"requests":{"cpu":"100m"}}}]`, 350},
		"init after a sidecar counts the sidecar": {`"initContainers":[
				{"name":"s","restartPolicy":"Always","resources":{"requests":{"cpu":"250m"}}},
				{"name":"i","resources":{"requests":{"cpu":"1"}}}],
			"containers":[{"name":"a","resources":{"requests":{"cpu":"100m"}}}]`, 1250},
		"overhead added": {`"initContainers":[{"name":"i","resources":{"requests":{"cpu":"1"}}}],
			"containers":[{"name":"a","resources":{"requests":{"cpu":"100m"}}}],"overhead":{"cpu":"250m"}`, 1250},
		"pod-level resources": {`"resources":{"requests":{"cpu":"3"}},
			"containers":[{"name":"a","resources":{"requests":{"cpu":"100m"}}}]`, 3000},
	} {
		t.Run(name, func(t *testing.T) {
			in := `{"kind":"List","items":[{"kind":"Pod","metadata":{"name":"p","namespace":"n","uid":"u1"},"spec":{` + tc.spec + `}}]}`
			pods, err := ParsePods(strings.NewReader(in))
			if err != nil {
				t.Fatal(err)
			}
			if got := *pods[0].RequestMilliCPU; got != tc.want {
				t.Errorf("RequestMilliCPU = %d, want %d", got, tc.want)
			}
		})
	}
}

// Without status.qosClass the QoS class is computed as the kubelet does
// (GetPodQOS): init containers count, and zero quantities are no request.
func TestComputedQoSCountsInitContainers(t *testing.T) {
	guaranteed := `{"requests":{"cpu":"1","memory":"1Gi"},"limits":{"cpu":"1","memory":"1Gi"}}`
	for name, tc := range map[string]struct {
		spec, want string
	}{
		"only an init container asks": {`"initContainers":[{"name":"i","resources":{"requests":{"cpu":"100m"}}}],"containers":[{"name":"a"}]`, "burstable"},
		"init container without limits": {`"initContainers":[{"name":"i","resources":{"requests":{"cpu":"100m"}}}],
			"containers":[{"name":"a","resources":` + guaranteed + `}]`, "burstable"},
		"all guaranteed":  {`"initContainers":[{"name":"i","resources":` + guaranteed + `}],"containers":[{"name":"a","resources":` + guaranteed + `}]`, "guaranteed"},
		"zero is nothing": {`"containers":[{"name":"a","resources":{"requests":{"cpu":"0"}}}]`, "besteffort"},
		// Pod-level resources decide alone (the kubelet's ComputePodQOS).
		"pod-level request only":   {`"resources":{"requests":{"cpu":"2"}},"containers":[{"name":"a"}]`, "burstable"},
		"pod-level guaranteed":     {`"resources":` + guaranteed + `,"containers":[{"name":"a"},{"name":"b","resources":{"requests":{"cpu":"100m"}}}]`, "guaranteed"},
		"pod-level cpu limit only": {`"resources":{"requests":{"cpu":"1"},"limits":{"cpu":"1"}},"containers":[{"name":"a","resources":` + guaranteed + `}]`, "burstable"},
	} {
		t.Run(name, func(t *testing.T) {
			in := `{"kind":"List","items":[{"kind":"Pod","metadata":{"name":"p","namespace":"n","uid":"u1"},"spec":{` + tc.spec + `}}]}`
			pods, err := ParsePods(strings.NewReader(in))
			if err != nil {
				t.Fatal(err)
			}
			if pods[0].QoS != tc.want {
				t.Errorf("QoS %q, want %q", pods[0].QoS, tc.want)
			}
		})
	}
}
