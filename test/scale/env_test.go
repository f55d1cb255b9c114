package scale

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// env is the scale API server the lane runs against (scripts/scale up).
type env struct {
	kubeconfig string
	// admin is the cluster admin's configuration (system:masters), with
	// client-side rate limits lifted: the test makes objects in bulk.
	admin *rest.Config
	cs    kubernetes.Interface
	dyn   dynamic.Interface
	// kwok says whether kwok runs (CGWARDEN_SCALE_KWOK=1, scripts/scale
	// env); without it the test marks Nodes Ready and Pods Running itself.
	kwok bool
}

var (
	laneOnce sync.Once
	laneEnv  *env
	laneErr  error
)

// lane returns the scale API server, or skips the test when there is none
// (fails under CGWARDEN_REQUIRE_REAL=1, as scripts/test runs it).
func lane(t *testing.T) *env {
	t.Helper()
	kc := os.Getenv("CGWARDEN_SCALE_KUBECONFIG")
	if kc == "" {
		msg := "no scale API server: run under scripts/scale up and eval \"$(scripts/scale env)\""
		if os.Getenv("CGWARDEN_REQUIRE_REAL") == "1" {
			t.Fatal(msg + " (CGWARDEN_REQUIRE_REAL=1)")
		}
		t.Skip(msg)
	}
	laneOnce.Do(func() { laneEnv, laneErr = openEnv(kc) })
	if laneErr != nil {
		t.Fatal(laneErr)
	}
	return laneEnv
}

func openEnv(kc string) (*env, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kc, err)
	}
	rc.QPS, rc.Burst = -1, 0 // no client-side limit (a negative QPS disables it)
	rc.UserAgent = "cgwarden-scale-test"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	e := &env{kubeconfig: kc, admin: rc, cs: cs, dyn: dyn, kwok: os.Getenv("CGWARDEN_SCALE_KWOK") == "1"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil {
			return e, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the scale API server is not ready: %w", err)
		case <-time.After(time.Second):
		}
	}
}

// sizes reads a comma-separated list of integers from the environment
// variable name, or returns def: the lane's sizes, which the benchmarks
// raise (docs/scale.md).
func sizes(t *testing.T, name string, def ...int) []int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want positive integers separated by commas", name, v)
		}
		out = append(out, n)
	}
	return out
}
