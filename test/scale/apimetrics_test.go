package scale

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape is one reading of a /metrics page.
type scrape map[string]*dto.MetricFamily

// parseScrape reads Prometheus text exposition.
func parseScrape(r io.Reader) (scrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return scrape(mf), nil
}

// apiMetrics reads the API server's own /metrics (as the cluster admin).
func (e *env) apiMetrics(ctx context.Context) (scrape, error) {
	raw, err := e.cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("API server /metrics: %w", err)
	}
	return parseScrape(bytes.NewReader(raw))
}

// httpsMetrics reads a /metrics page over HTTPS without verifying the
// certificate (the sizer's self-signed one, on loopback).
func httpsMetrics(ctx context.Context, url string) (scrape, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseScrape(resp.Body)
}

// match says whether a metric's labels carry every pair of want ("" as a
// value matches only an absent or empty label).
func match(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		got := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == k {
				got = l.GetValue()
			}
		}
		if got != v {
			return false
		}
	}
	return true
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sum adds the counters and gauges of family name whose labels match
// want, and where keep (if set) keeps them.
func (s scrape) sum(name string, want map[string]string, keep func(*dto.Metric) bool) float64 {
	var total float64
	mf := s[name]
	if mf == nil {
		return 0
	}
	for _, m := range mf.GetMetric() {
		if !match(m, want) || (keep != nil && !keep(m)) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

// histogram is a histogram's cumulative buckets, summed over the series
// whose labels match.
type histogram struct {
	count  float64
	sum    float64
	bounds []float64
	cum    []float64
}

func (s scrape) histogram(name string, want map[string]string) histogram {
	var h histogram
	mf := s[name]
	if mf == nil {
		return h
	}
	byBound := map[float64]float64{}
	for _, m := range mf.GetMetric() {
		if !match(m, want) || m.Histogram == nil {
			continue
		}
		h.count += float64(m.GetHistogram().GetSampleCount())
		h.sum += m.GetHistogram().GetSampleSum()
		for _, b := range m.GetHistogram().GetBucket() {
			byBound[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
	}
	for b := range byBound {
		h.bounds = append(h.bounds, b)
	}
	sort.Float64s(h.bounds)
	for _, b := range h.bounds {
		h.cum = append(h.cum, byBound[b])
	}
	return h
}

// minus is h − o, bucket by bucket (the observations between two scrapes).
func (h histogram) minus(o histogram) histogram {
	d := histogram{count: h.count - o.count, sum: h.sum - o.sum, bounds: h.bounds}
	for i, b := range h.bounds {
		prev := 0.0
		for j, ob := range o.bounds {
			if ob == b {
				prev = o.cum[j]
			}
		}
		d.cum = append(d.cum, h.cum[i]-prev)
	}
	return d
}

// above is how many observations were above bound (bound must be one of
// the bucket bounds).
func (h histogram) above(bound float64) float64 {
	for i, b := range h.bounds {
		if b == bound {
			return h.count - h.cum[i]
		}
	}
	return math.NaN()
}

// quantile is Prometheus's histogram_quantile: linear within the bucket
// that holds the q-th observation.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * h.count
	lower, below := 0.0, 0.0
	for i, b := range h.bounds {
		if h.cum[i] >= rank {
			if math.IsInf(b, 1) {
				return lower
			}
			in := h.cum[i] - below
			if in == 0 {
				return b
			}
			return lower + (b-lower)*(rank-below)/in
		}
		lower, below = b, h.cum[i]
	}
	return lower
}

// requests counts apiserver_request_total by "VERB resource[/subresource]"
// (non-resource requests by path), leaving out what keep refuses.
func (s scrape) requests(keep func(verb, resource string) bool) map[string]float64 {
	out := map[string]float64{}
	mf := s["apiserver_request_total"]
	if mf == nil {
		return out
	}
	for _, m := range mf.GetMetric() {
		verb, res, sub := label(m, "verb"), label(m, "resource"), label(m, "subresource")
		if sub != "" {
			res += "/" + sub
		}
		if keep != nil && !keep(verb, res) {
			continue
		}
		out[verb+" "+res] += m.GetCounter().GetValue()
	}
	return out
}

// delta is after − before, key by key, without the zeros.
func delta(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func total(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

// describe writes a map's entries, largest first.
func describe(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.0f", k, m[k])
	}
	return b.String()
}
