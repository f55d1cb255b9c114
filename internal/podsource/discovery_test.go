package podsource

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"
)

// serves reads the group version's resource list as client-go's discovery
// client does: a resource listed is served; one not listed, or a group
// version the API server does not serve (404), is not.
func TestServesReadsTheResourceList(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/vm.neon.tech/v1" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"vm.neon.tech/v1","resources":[{"name":"virtualmachines","namespaced":true,"kind":"VirtualMachine","verbs":["get","list","watch"]},{"name":"ippools","namespaced":true,"kind":"IPPool","verbs":["get"]}]}`))
	}))
	defer api.Close()
	c, err := rest.UnversionedRESTClientFor(withJSON(&rest.Config{Host: api.URL, QPS: -1}))
	if err != nil {
		t.Fatal(err)
	}
	disc := serves(c)
	if ok, err := disc(vmResources["neonvm"]); !ok || err != nil {
		t.Errorf("virtualmachines: %v, %v; want served", ok, err)
	}
	gvr := vmResources["neonvm"]
	gvr.Resource = "virtualmachinemigrations"
	if ok, err := disc(gvr); ok || err != nil {
		t.Errorf("a resource not listed: %v, %v; want not served, no error", ok, err)
	}
	if ok, err := disc(vmResources["kubevirt"]); ok || err == nil {
		t.Errorf("a group version not served: %v, %v; want not served, with the 404", ok, err)
	}
}
