package apiconn

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
)

// EventRecorder is the Events recorder of every cgwarden process that
// writes Events (the agent, the NRI plugin, the sizer): one client-go
// broadcaster per process, sinking to the API server through rc, its
// Events attributed to source (Host set by node agents, empty for the
// sizer). client-go's broadcaster already correlates and rate-limits
// (its EventCorrelator: similar Events aggregated, a token bucket per
// source and object) and retries a failed write; cgwarden's own bounds
// per scan sit above it. stop flushes what is queued and stops the
// broadcaster; ctx bounds its writes.
func EventRecorder(ctx context.Context, rc *rest.Config, source corev1.EventSource) (rec record.EventRecorder, stop func(), err error) {
	cs, err := typedcorev1.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.Events("")})
	return b.NewRecorder(coreScheme(), source), b.Shutdown, nil
}

// coreScheme knows the core/v1 kinds, all an Event of ours refers to
// (Pods, Nodes): the recorder needs a scheme only to name an object's
// kind, and client-go's whole scheme is far larger.
func coreScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = corev1.AddToScheme(s)
	return s
}
