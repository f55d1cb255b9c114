package cluster

import (
	"context"
	"fmt"
	"html"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hpaPoint is one sample of TestSeedHPAScenario's trace: what the HPA
// did and what each source said of the Deployment's pods, summed.
type hpaPoint struct {
	at       time.Duration
	phase    string
	replicas float64
	util     float64 // the HPA's CPU utilisation, %; NaN when unknown
	// Cores summed over the Deployment's pods: the kubelet's Summary for
	// the pods and for their containers (what metrics-server sums), and
	// the agent's pods (NaN before the agent runs, or when unread).
	kubeletPod, kubeletContainers, agent float64
}

// hpaTrace samples the scenario every 5 s until stop: the figures a
// chart of the run is drawn from (CGWARDEN_HPA_CHART=file.svg) and the
// per-phase lines of the test's log. Reads that fail leave a gap; they
// never stop the test.
type hpaTrace struct {
	e       *env
	ns      string
	shape   string // what the chart's title and file name say of the runtime
	kubelet func(string) (int, string)
	start   time.Time

	mu     sync.Mutex
	phase  string
	agent  func(string) (int, string)
	points []hpaPoint
	done   chan struct{}
	wg     sync.WaitGroup
}

func (e *env) traceHPA(ns, shape string, kubelet func(string) (int, string), phase string) *hpaTrace {
	tr := &hpaTrace{e: e, ns: ns, shape: shape, kubelet: kubelet, start: time.Now(), phase: phase, done: make(chan struct{})}
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			tr.sample()
			select {
			case <-tr.done:
				return
			case <-tick.C:
			}
		}
	}()
	return tr
}

// enter starts a phase; agent, when not nil, is the agent's reader from
// now on.
func (tr *hpaTrace) enter(phase string, agent func(string) (int, string)) {
	tr.sample() // how the phase before ended
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.phase = phase
	if agent != nil {
		tr.agent = agent
	}
}

func (tr *hpaTrace) sample() {
	ctx := context.Background()
	tr.mu.Lock()
	phase, agent := tr.phase, tr.agent
	tr.mu.Unlock()
	p := hpaPoint{at: time.Since(tr.start), phase: phase, util: math.NaN(), kubeletPod: math.NaN(), kubeletContainers: math.NaN(), agent: math.NaN()}
	d, err := tr.e.cs.AppsV1().Deployments(tr.ns).Get(ctx, "spin-test", metav1.GetOptions{})
	if err != nil {
		return
	}
	p.replicas = float64(*d.Spec.Replicas)
	if h, err := tr.e.cs.AutoscalingV2().HorizontalPodAutoscalers(tr.ns).Get(ctx, "spinapp-autoscaler", metav1.GetOptions{}); err == nil {
		if u := cpuUtilisation(h); u >= 0 {
			p.util = float64(u)
		}
	}
	if s, err := readSummaryCPU(tr.kubelet, tr.ns); err == nil {
		p.kubeletPod, p.kubeletContainers = sumCores(s)
	}
	if agent != nil {
		if s, err := readSummaryCPU(agent, tr.ns); err == nil {
			p.agent, _ = sumCores(s)
		}
	}
	tr.mu.Lock()
	tr.points = append(tr.points, p)
	tr.mu.Unlock()
}

// sumCores sums the pods' and the containers' figures of s, in cores.
func sumCores(s map[string]podCPU) (pod, containers float64) {
	for _, v := range s {
		pod += max(v.pod, 0) / 1e9
		containers += max(v.containers, 0) / 1e9
	}
	return pod, containers
}

// stop ends the sampling, logs each phase's span and its last sample and, when
// CGWARDEN_HPA_CHART is set (a file name, X.svg), draws the run in
// X-<shape>.svg.
func (tr *hpaTrace) stop(t *testing.T) {
	t.Helper()
	close(tr.done)
	tr.wg.Wait()
	tr.sample() // the state the test ended on
	var phases []string
	by := map[string][]hpaPoint{}
	for _, p := range tr.points {
		if _, seen := by[p.phase]; !seen {
			phases = append(phases, p.phase)
		}
		by[p.phase] = append(by[p.phase], p)
	}
	for _, ph := range phases {
		ps := by[ph]
		last, most := ps[len(ps)-1], 0.0
		for _, p := range ps {
			most = max(most, p.replicas)
		}
		t.Logf("trace %s | %s | %.0f–%.0f s | up to %.0f replicas | at its end: %.0f replicas, HPA %s | cores summed: kubelet pods %.2f, containers %.2f, cgwarden %s |",
			tr.shape, ph, ps[0].at.Seconds(), last.at.Seconds(), most, last.replicas, orUnknown(last.util, "%.0f%%"),
			last.kubeletPod, last.kubeletContainers, orUnknown(last.agent, "%.2f"))
	}
	if out := os.Getenv("CGWARDEN_HPA_CHART"); out != "" {
		out = strings.TrimSuffix(out, ".svg") + "-" + tr.shape + ".svg"
		if err := os.WriteFile(out, []byte(hpaSVG(tr.shape, tr.points)), 0o644); err != nil {
			t.Errorf("writing the chart: %v", err)
		} else {
			t.Logf("the run drawn in %s", out)
		}
	}
}

// orUnknown formats v, or says "unknown" for NaN.
func orUnknown(v float64, format string) string {
	if math.IsNaN(v) {
		return "unknown"
	}
	return fmt.Sprintf(format, v)
}

// hpaSVG draws the trace: three panels over one time axis (replicas;
// the HPA's utilisation against its 50% target; the pods' CPU as each
// source reports it), each phase's start marked and named. Written here,
// not by a library: it is one picture for docs/demo.md, made from a
// test's own samples.
func hpaSVG(shape string, points []hpaPoint) string {
	const (
		w, left, right = 760, 64, 16
		panelH, gap    = 120, 44
		top            = 84
	)
	end := 1.0
	for _, p := range points {
		end = max(end, p.at.Seconds())
	}
	x := func(s float64) float64 { return left + (w-left-right)*s/end }
	var b strings.Builder
	height := top + 3*panelH + 2*gap + 20 + 16*3 + 8
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" role="img" aria-labelledby="t d" font-family="system-ui, sans-serif" font-size="12">`+"\n", w, height)
	fmt.Fprintf(&b, `<title id="t">Seed 003's HPA scenario on the cluster lane, RuntimeClass %s: replicas, the HPA's CPU utilisation and the pods' CPU as each source reports it, through the modes</title>`+"\n", html.EscapeString(shape))
	b.WriteString(`<desc id="d">Drawn from TestSeedHPAScenario's samples, every 5 seconds; docs/demo.md gives the same figures as a table.</desc>` + "\n")
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	type series struct {
		name, color string
		v           func(hpaPoint) float64
	}
	panels := []struct {
		title  string
		unit   string
		series []series
		target float64
		ticks  []float64 // nil: 0, half the top, the top
	}{
		{"Replicas (the HPA's maximum here: 3)", "", []series{{"replicas", "#1f4e8c", func(p hpaPoint) float64 { return p.replicas }}}, math.NaN(), []float64{0, 1, 2, 3}},
		{"The HPA's CPU utilisation (target 50%)", "%", []series{{"utilisation", "#b34700", func(p hpaPoint) float64 { return p.util }}}, 50, nil},
		{"CPU of the Deployment's pods, summed, as each source reports it", "cores", []series{
			{"kubelet: the pods (Summary pods[].cpu)", "#1f4e8c", func(p hpaPoint) float64 { return p.kubeletPod }},
			{"kubelet: their containers (what metrics-server sums)", "#b34700", func(p hpaPoint) float64 { return p.kubeletContainers }},
			{"cgwarden: the pods", "#2d6a2e", func(p hpaPoint) float64 { return p.agent }},
		}, math.NaN(), nil},
	}
	// Phase starts.
	last := ""
	for _, p := range points {
		if p.phase == last {
			continue
		}
		last = p.phase
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#888" stroke-dasharray="3 3"/>`+"\n", x(p.at.Seconds()), top-8, x(p.at.Seconds()), top+3*panelH+2*gap)
	}
	for i, pn := range panels {
		y0 := float64(top + i*(panelH+gap))
		hi := 0.0
		for _, s := range pn.series {
			for _, p := range points {
				if v := s.v(p); !math.IsNaN(v) {
					hi = max(hi, v)
				}
			}
		}
		if !math.IsNaN(pn.target) {
			hi = max(hi, pn.target)
		}
		hi = niceCeil(hi)
		ticks := []float64{0, hi / 2, hi}
		if pn.ticks != nil {
			ticks, hi = pn.ticks, pn.ticks[len(pn.ticks)-1]
		}
		y := func(v float64) float64 { return y0 + panelH - panelH*v/hi }
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" font-weight="600">%s</text>`+"\n", left, y0-6, html.EscapeString(pn.title))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#bbb"/>`+"\n", left, y0+panelH, w-right, y0+panelH)
		for _, v := range ticks {
			suffix := ""
			if pn.unit == "%" {
				suffix = "%"
			}
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s%s</text>`+"\n", left-6, y(v)+4, trimFloat(v), suffix)
		}
		if !math.IsNaN(pn.target) {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#555" stroke-dasharray="6 3"/>`+"\n", left, y(pn.target), w-right, y(pn.target))
		}
		for j, s := range pn.series {
			var path strings.Builder
			pen := "M"
			for _, p := range points {
				v := s.v(p)
				if math.IsNaN(v) {
					pen = "M"
					continue
				}
				fmt.Fprintf(&path, "%s%.1f %.1f ", pen, x(p.at.Seconds()), y(v))
				pen = "L"
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.TrimSpace(path.String()), s.color)
			if len(pn.series) > 1 { // a legend under the panel, a line per series
				ly := y0 + panelH + 20 + float64(16*j)
				fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="14" height="3" fill="%s"/><text x="%d" y="%.0f">%s</text>`+"\n", left, ly-4, s.color, left+20, ly, html.EscapeString(s.name))
			}
		}
	}
	// Phase names, at the top, and the time axis.
	last = ""
	for _, p := range points {
		if p.phase == last {
			continue
		}
		last = p.phase
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="11">%s</text>`+"\n", x(p.at.Seconds())+3, 14+14*(phaseIndex(points, p.phase)%4), html.EscapeString(p.phase))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%.0f s</text>`+"\n", w-right, height-4, end)
	fmt.Fprintf(&b, `<text x="%d" y="%d">0 s (the Deployment made)</text>`+"\n", left, height-4)
	b.WriteString("</svg>\n")
	return b.String()
}

// phaseIndex is the order in which phase first appears.
func phaseIndex(points []hpaPoint, phase string) int {
	seen := map[string]bool{}
	for _, p := range points {
		if p.phase == phase {
			return len(seen)
		}
		seen[p.phase] = true
	}
	return 0
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for v <= 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}
