package sizer

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
)

// Level is where the webhook puts a NeonVM runner pod's CPU request: on
// the pod (spec.resources.requests.cpu, pod-level resources) or on its VM
// container (spec.containers[i].resources.requests.cpu). Either way the
// kubelet writes the pod cgroup's weight from it (pod-level resources
// replace the containers' sum: k8s.io/component-helpers resource.PodRequests).
type Level string

const (
	LevelContainer Level = "container"
	LevelPod       Level = "pod"
)

// PodLevelMode is --pod-level: auto (probe the cluster at start, ProbeLevel),
// on (LevelPod) or off (LevelContainer).
type PodLevelMode string

const (
	PodLevelAuto PodLevelMode = "auto"
	PodLevelOn   PodLevelMode = "on"
	PodLevelOff  PodLevelMode = "off"
)

// ParsePodLevelMode reads --pod-level.
func ParsePodLevelMode(s string) (PodLevelMode, error) {
	switch m := PodLevelMode(s); m {
	case PodLevelAuto, PodLevelOn, PodLevelOff:
		return m, nil
	}
	return "", fmt.Errorf("--pod-level %q: want auto, on or off", s)
}

// PodLevelResizeFeature is the feature gate that lets the resize
// subresource change a pod's pod-level resources
// (k8s.io/kubernetes pkg/features: alpha in 1.35, beta and on by default
// from 1.36; it needs PodLevelResources, beta and on by default from 1.34,
// and NodeDeclaredFeatures). It is also the name a kubelet with the gate
// on declares in its Node's status.declaredFeatures
// (k8s.io/component-helpers nodedeclaredfeatures/features/inplacepodresize),
// and the API server's NodeDeclaredFeatureValidator admission refuses a
// pod-level resize on a node that does not declare it.
const PodLevelResizeFeature = "InPlacePodLevelResourcesVerticalScaling"

// podLevelSince is the first Kubernetes minor whose API server has both
// PodLevelResources and InPlacePodLevelResourcesVerticalScaling on by
// default.
var podLevelSince = version.MajorMinor(1, 36)

// NodeFeatures is what the nodes declare of PodLevelResizeFeature: how
// many were looked at, and the first that does not declare it ("" if
// every one does).
type NodeFeatures struct {
	Seen    int
	Lacking string
}

// ChooseLevel decides the webhook's Level from --pod-level, the API
// server's version (its /version gitVersion) and the nodes. In auto mode
// the pod is sized at pod level only when both sides can resize it there:
// the API server is at least 1.36 (its gates' defaults: a pod-level
// request is kept at admission, not dropped, and its resize validates),
// and every node's kubelet declares PodLevelResizeFeature (its gate is on,
// and with it PodLevelResources: a kubelet without that gate refuses to
// run a pod with pod-level resources). Anything less keeps the container
// request, which every supported version resizes. The reason says why, for
// the log.
func ChooseLevel(mode PodLevelMode, serverVersion string, nodes NodeFeatures) (Level, string) {
	switch mode {
	case PodLevelOn:
		return LevelPod, "--pod-level=on"
	case PodLevelOff:
		return LevelContainer, "--pod-level=off"
	}
	v, err := version.ParseGeneric(serverVersion)
	switch {
	case err != nil:
		return LevelContainer, fmt.Sprintf("the API server's version %q is not one: %v", serverVersion, err)
	case v.LessThan(podLevelSince):
		return LevelContainer, fmt.Sprintf("API server %s: %s is on by default from 1.36", serverVersion, PodLevelResizeFeature)
	case nodes.Seen == 0:
		return LevelContainer, fmt.Sprintf("API server %s, but no node yet to declare %s", serverVersion, PodLevelResizeFeature)
	case nodes.Lacking != "":
		return LevelContainer, fmt.Sprintf("API server %s, but node %s does not declare %s", serverVersion, nodes.Lacking, PodLevelResizeFeature)
	}
	return LevelPod, fmt.Sprintf("API server %s and every node (%d) declares %s", serverVersion, nodes.Seen, PodLevelResizeFeature)
}

// nodeListPage bounds one page of the nodes' list: at 5,000 nodes the
// whole list is tens of MB, read once at start.
const nodeListPage = 500

// ProbeLevel asks the API server what ChooseLevel needs, with what the
// sizer may read anyway: its /version (discovery, open to every client:
// system:public-info-viewer) and its nodes' status.declaredFeatures (list
// nodes: the resize controller's node informer). The API server's own
// feature gates are not readable with less than its /metrics
// (kubernetes_feature_enabled), and its OpenAPI documents spec.resources
// whatever the gates say. With on or off it asks nothing.
func ProbeLevel(ctx context.Context, cs kubernetes.Interface, mode PodLevelMode) (Level, string, error) {
	if mode != PodLevelAuto {
		l, why := ChooseLevel(mode, "", NodeFeatures{})
		return l, why, nil
	}
	info, err := cs.Discovery().ServerVersion()
	if err != nil {
		return LevelContainer, "", fmt.Errorf("the API server's version: %w", err)
	}
	var nf NodeFeatures
	opts := metav1.ListOptions{Limit: nodeListPage}
	for {
		list, err := cs.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return LevelContainer, "", fmt.Errorf("nodes: %w", err)
		}
		for _, n := range list.Items {
			nf.Seen++
			if nf.Lacking == "" && !slices.Contains(n.Status.DeclaredFeatures, PodLevelResizeFeature) {
				nf.Lacking = n.Name
			}
		}
		if nf.Lacking != "" || list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	l, why := ChooseLevel(mode, info.GitVersion, nf)
	return l, why, nil
}
