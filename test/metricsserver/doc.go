// Package metricsserver checks that metrics-server's own kubelet client
// (sigs.k8s.io/metrics-server/pkg/scraper/client/resource) reads
// cgwarden's /metrics/resource: it builds cgwarden from the parent module,
// serves the seed 003 snapshot, and scrapes it the way metrics-server
// scrapes a kubelet.
//
// It is its own Go module because metrics-server pins older k8s.io
// libraries than cgwarden uses; run it with
//
//	cd test/metricsserver && go test ./...
package metricsserver
