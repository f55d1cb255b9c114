package apiconn

import (
	"net/http"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig is the API server's client configuration of every cgwarden
// command that talks to it (serve, sizer, nri): kubeconfig when given,
// else in-cluster; its transport wrapped by wrap when given (a Reach's
// Wrap, so an outage is logged once).
func RESTConfig(kubeconfig string, wrap func(http.RoundTripper) http.RoundTripper) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	if wrap != nil {
		rc.Wrap(wrap)
	}
	return rc, nil
}
