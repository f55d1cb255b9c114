package apiconn

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// Client is a REST client of one API group version (gv), whose scheme
// holds only what add registers: the group version's own types.
//
// Hand-made rather than client-go's typed clients (typed/core/v1,
// typed/authentication/v1, ...) or its discovery client, because each of
// those imports k8s.io/client-go/kubernetes/scheme, whose package
// initialisation registers every built-in API group: linked into a
// binary, it runs at every start of every subcommand, whether or not a
// client is ever made, and its code and type data stay resident (about
// 10 MiB of a process's RSS measured on its own, docs/benchmarks.md). The
// agent reads and writes a handful of resources; a scheme with their
// group is all a client needs to encode and decode them.
func Client(rc *rest.Config, gv schema.GroupVersion, add func(*runtime.Scheme) error) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	if err := add(scheme); err != nil {
		return nil, fmt.Errorf("scheme of %s: %w", gv, err)
	}
	c := rest.CopyConfig(rc)
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.GroupVersion = &gv
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	_ = rest.SetKubernetesDefaults(c) // the user agent, as a typed client's
	cl, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("%s client: %w", gv, err)
	}
	return cl, nil
}
