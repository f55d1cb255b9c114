package apiconn

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	recordutil "k8s.io/client-go/tools/record/util"
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
//
// count, when set, has every write of the sink reported to it (a
// CountingSink): what reached the API server, after the broadcaster's
// correlator dropped or aggregated what it would, and what the API
// server refused. The sizer counts its Events with it; the agent, which
// counts nothing, passes nil.
func EventRecorder(ctx context.Context, rc *rest.Config, source corev1.EventSource, count func(reason string, err error)) (rec record.EventRecorder, stop func(), err error) {
	s, err := NewEventSink(rc)
	if err != nil {
		return nil, nil, err
	}
	var sink record.EventSink = s
	if count != nil {
		sink = &CountingSink{Sink: s, Count: count}
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(sink)
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

// EventSink writes the broadcaster's Events to the API server: what
// client-go's typed/core/v1 EventSinkImpl does (create, update, and
// strategic-merge patch of an Event in its own namespace), over a
// core/v1-only Client, so that the typed clients, and with them
// client-go's whole scheme, are not linked (see Client).
type EventSink struct{ c rest.Interface }

var _ record.EventSink = (*EventSink)(nil)

// NewEventSink returns a sink writing through rc.
func NewEventSink(rc *rest.Config) (*EventSink, error) {
	c, err := Client(rc, corev1.SchemeGroupVersion, corev1.AddToScheme)
	if err != nil {
		return nil, err
	}
	return &EventSink{c}, nil
}

// The sink's methods take no context (record.EventSink has none): the
// broadcaster bounds them, as it does client-go's sink's.

// Create implements record.EventSink.
func (s *EventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.c.Post().NamespaceIfScoped(e.Namespace, e.Namespace != "").Resource("events").
		Body(e).Do(context.Background()).Into(out)
	return out, err
}

// Update implements record.EventSink.
func (s *EventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.c.Put().NamespaceIfScoped(e.Namespace, e.Namespace != "").Resource("events").Name(e.Name).
		Body(e).Do(context.Background()).Into(out)
	return out, err
}

// Patch implements record.EventSink.
func (s *EventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.c.Patch(types.StrategicMergePatchType).NamespaceIfScoped(e.Namespace, e.Namespace != "").Resource("events").Name(e.Name).
		Body(data).Do(context.Background()).Into(out)
	return out, err
}

// CountingSink reports each write of Sink to Count, with the Event's
// reason and the write's error (nil: the API server took it). It sees
// what the broadcaster really sends: an Event its correlator skipped (the
// spam filter's token bucket per source and object) or that a full
// broadcaster queue dropped never reaches it, and an Event aggregated
// into an earlier one arrives as a Patch of that one. A Patch refused
// with NotFound is not reported: the broadcaster then Creates the Event
// (client-go's recordEvent), and that write is. The broadcaster retries a
// write that did not reach the API server (up to 12 tries, 10 s apart)
// and not one the API server refused, so one Event may be reported
// failed several times before it is reported sent.
type CountingSink struct {
	Sink  record.EventSink
	Count func(reason string, err error)
}

var _ record.EventSink = (*CountingSink)(nil)

// Create implements record.EventSink.
func (s *CountingSink) Create(e *corev1.Event) (*corev1.Event, error) {
	out, err := s.Sink.Create(e)
	s.Count(e.Reason, err)
	return out, err
}

// Update implements record.EventSink.
func (s *CountingSink) Update(e *corev1.Event) (*corev1.Event, error) {
	out, err := s.Sink.Update(e)
	s.Count(e.Reason, err)
	return out, err
}

// Patch implements record.EventSink.
func (s *CountingSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out, err := s.Sink.Patch(e, data)
	if !recordutil.IsKeyNotFoundError(err) { // the test recordEvent makes
		s.Count(e.Reason, err)
	}
	return out, err
}
