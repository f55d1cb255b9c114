package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
)

// maxReport bounds what one agent may send (a node with thousands of
// containers is a few MB).
const maxReport = 64 << 20

// parallel is how many nodes are asked at once.
const parallel = 8

// nodeResult is one node's report as its agent sent it, or why not.
type nodeResult struct {
	agent
	body []byte
	err  error
}

// fetchAll asks every agent for path, parallel at a time, and returns the
// results in the agents' order.
func fetchAll(ctx context.Context, cfg *rest.Config, core v1.CoreV1Interface, agents []agent, port int, path, token string, timeout time.Duration) []nodeResult {
	out := make([]nodeResult, len(agents))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			body, err := fetch(ctx, cfg, core, a, port, path, token)
			out[i] = nodeResult{agent: a, body: body, err: err}
		}()
	}
	wg.Wait()
	return out
}

// fetch GETs path from one agent's loopback port through a port-forward,
// with the user's bearer token (none when "").
func fetch(ctx context.Context, cfg *rest.Config, core v1.CoreV1Interface, a agent, port int, path, token string) ([]byte, error) {
	u := core.RESTClient().Post().Resource("pods").Namespace(a.namespace).Name(a.pod).SubResource("portforward").URL()
	t, err := openTunnel(cfg, u, port)
	if err != nil {
		err = fmt.Errorf("port-forward to pod %s/%s: %w", a.namespace, a.pod, err)
		if strings.Contains(err.Error(), "forbidden") {
			err = fmt.Errorf("%w\n%s", err, rbacHint(a.namespace))
		}
		return nil, err
	}
	defer t.Close()
	client := &http.Client{Transport: &http.Transport{DialContext: t.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+path, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s from pod %s/%s port %d (is the agent serving --local-listen on 127.0.0.1:%d?): %w", path, a.namespace, a.pod, port, port, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReport+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s from pod %s/%s: %w", path, a.namespace, a.pod, err)
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("GET %s from pod %s/%s: %s: %s", path, a.namespace, a.pod, resp.Status, strings.TrimSpace(string(body)))
		switch {
		case resp.StatusCode == http.StatusUnauthorized && token == "":
			err = fmt.Errorf("%w\n%s", err, noTokenHint)
		case resp.StatusCode == http.StatusForbidden:
			err = fmt.Errorf("%w\nthe agent needs your user to be allowed get on nodes/stats of node %s (what /stats/summary needs; see docs/kubectl-plugin.md)", err, a.node)
		}
		return nil, err
	}
	if len(body) > maxReport {
		return nil, fmt.Errorf("GET %s from pod %s/%s: the report is over %d MiB", path, a.namespace, a.pod, maxReport>>20)
	}
	return body, nil
}
