package nriplugin

import (
	"fmt"

	"github.com/containerd/nri/pkg/api"

	"github.com/cgwarden/cgwarden/internal/layout"
)

// Annotation marks a container whose cgroupsPath this plugin set; its
// value is the path. It tells, in the container's own spec (ctr containers
// info, the bundle's config.json), who chose the path.
const Annotation = "cgwarden.io/nri-cgroups-path"

// Decision is what the plugin does with one container.
type Decision struct {
	// Handler is the pod's runtime handler ("" for the runtime's default
	// handler, or a runtime too old to say: listed only with
	// Options.DefaultHandler).
	Handler string
	// Place is set when the container's cgroupsPath is to be To.
	Place bool
	// From is the cgroupsPath the runtime proposed; To the kubelet's
	// layout's. They are equal where the runtime already gave the right
	// path (a cgroupfs node).
	From, To string
	// Err says why a listed handler's container cannot be placed: it is
	// let through unchanged.
	Err error
}

// Changed reports whether placing the container changes its path.
func (d Decision) Changed() bool { return d.Place && d.From != d.To }

// Decide says what to do with container ctr of pod, created by runtime (a
// runtime name as layout knows it: containerd, crio) for the listed
// handlers; listed("") says whether the default handler's are placed. It is pure: the pod's cgroup parent and the container's ID
// give the place, nothing is read.
func Decide(listed func(handler string) bool, runtime string, pod *api.PodSandbox, ctr *api.Container) Decision {
	d := Decision{Handler: pod.GetRuntimeHandler()}
	if !listed(d.Handler) {
		return d
	}
	d.From = ctr.GetLinux().GetCgroupsPath()
	podCgroup, driver, err := layout.PodCgroup(pod.GetLinux().GetCgroupParent())
	if err != nil {
		d.Err = fmt.Errorf("pod %s/%s: %w", pod.GetNamespace(), pod.GetName(), err)
		return d
	}
	to, err := layout.ContainerPath(driver, runtime, podCgroup, ctr.GetId())
	if err != nil {
		d.Err = fmt.Errorf("container %s of pod %s/%s: %w", ctr.GetName(), pod.GetNamespace(), pod.GetName(), err)
		return d
	}
	d.Place, d.To = true, to
	return d
}

// Adjustment is the NRI adjustment that places the container: its
// cgroupsPath, and Annotation saying so.
func (d Decision) Adjustment() *api.ContainerAdjustment {
	adj := &api.ContainerAdjustment{}
	adj.SetLinuxCgroupsPath(d.To)
	adj.AddAnnotation(Annotation, d.To)
	return adj
}
