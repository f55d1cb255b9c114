package main

import (
	"bytes"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup1/stats"
	taskapi "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/ttrpc"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// statsAnswer is a ttrpc response to Task.Stats carrying m as typeURL.
func statsAnswer(t *testing.T, typeURL string, m proto.Message) []byte {
	t.Helper()
	v, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	p, err := proto.Marshal(&taskapi.StatsResponse{Stats: &anypb.Any{TypeUrl: typeURL, Value: v}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(&ttrpc.Response{Payload: p})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMicrosecondsRewritesTheV1CPU(t *testing.T) {
	in := &stats.Metrics{
		CPU:    &stats.CPUStat{Usage: &stats.CPUUsage{Total: 5_000_000_999, Kernel: 1_000_000_000, User: 4_000_000_000, PerCPU: []uint64{2_000_000_000, 3_000_000_000}}},
		Memory: &stats.MemoryStat{RSS: 123456},
	}
	out, err := microseconds(statsAnswer(t, v1MetricsType, in))
	if err != nil {
		t.Fatal(err)
	}
	var resp ttrpc.Response
	var sr taskapi.StatsResponse
	var m stats.Metrics
	if err := proto.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(resp.Payload, &sr); err != nil {
		t.Fatal(err)
	}
	if sr.Stats.TypeUrl != v1MetricsType {
		t.Errorf("type %q, want %q", sr.Stats.TypeUrl, v1MetricsType)
	}
	if err := proto.Unmarshal(sr.Stats.Value, &m); err != nil {
		t.Fatal(err)
	}
	u := m.CPU.Usage
	if u.Total != 5_000_000 || u.Kernel != 1_000_000 || u.User != 4_000_000 || len(u.PerCPU) != 2 || u.PerCPU[0] != 2_000_000 || u.PerCPU[1] != 3_000_000 {
		t.Errorf("CPU usage %+v, want each figure of %+v divided by 1000", u, in.CPU.Usage)
	}
	if m.Memory.GetRSS() != 123456 {
		t.Errorf("memory RSS %d, want 123456 unchanged", m.Memory.GetRSS())
	}
}

func TestMicrosecondsLeavesOtherAnswers(t *testing.T) {
	other := statsAnswer(t, "io.containerd.cgroups.v2.Metrics", &stats.Metrics{CPU: &stats.CPUStat{Usage: &stats.CPUUsage{Total: 7}}})
	failed, err := proto.Marshal(&ttrpc.Response{Status: &rpcstatus.Status{Code: 5, Message: "not found"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string][]byte{"another metrics type": other, "an error": failed} {
		out, err := microseconds(in)
		if err != nil || !bytes.Equal(out, in) {
			t.Errorf("%s: rewritten to %x (%v), want it unchanged", name, out, err)
		}
	}
	if _, err := microseconds([]byte{0xff, 0xff}); err == nil {
		t.Error("a malformed answer: no error")
	}
}

func TestIsStats(t *testing.T) {
	for _, c := range []struct {
		service, method string
		want            bool
	}{
		{"containerd.task.v3.Task", "Stats", true},
		{"containerd.task.v2.Task", "Stats", true},
		{"containerd.task.v3.Task", "State", false},
		{"containerd.events.v1.Events", "Stats", false},
	} {
		b, err := proto.Marshal(&ttrpc.Request{Service: c.service, Method: c.method})
		if err != nil {
			t.Fatal(err)
		}
		if got := isStats(b); got != c.want {
			t.Errorf("%s.%s: isStats %v, want %v", c.service, c.method, got, c.want)
		}
	}
}

func TestFrames(t *testing.T) {
	var buf bytes.Buffer
	in := frame{stream: 7, typ: typeResponse, flags: 1, payload: []byte("answer")}
	if err := writeFrame(&buf, in); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != headerLength+len(in.payload) {
		t.Fatalf("%d bytes written, want %d", buf.Len(), headerLength+len(in.payload))
	}
	out, err := readFrame(&buf)
	if err != nil || out.stream != 7 || out.typ != typeResponse || out.flags != 1 || string(out.payload) != "answer" {
		t.Errorf("read back %+v (%v), want %+v", out, err, in)
	}
	huge := []byte{0x01, 0, 0, 0, 0, 0, 0, 1, typeRequest, 0} // 16 MiB announced
	if _, err := readFrame(bytes.NewReader(huge)); err == nil {
		t.Error("a 16 MiB message: no error")
	}
	if _, err := readFrame(bytes.NewReader([]byte{0, 0, 0, 9, 0, 0, 0, 1, typeRequest, 0, 'x'})); err == nil {
		t.Error("a message cut short: no error")
	}
}

// FuzzMicroseconds: whatever the real shim answers, the rewrite returns
// an error or a well-formed answer, and never panics.
func FuzzMicroseconds(f *testing.F) {
	f.Add([]byte{})
	v, _ := proto.Marshal(&stats.Metrics{CPU: &stats.CPUStat{Usage: &stats.CPUUsage{Total: 1e9}}})
	p, _ := proto.Marshal(&taskapi.StatsResponse{Stats: &anypb.Any{TypeUrl: v1MetricsType, Value: v}})
	seed, _ := proto.Marshal(&ttrpc.Response{Payload: p})
	f.Add(seed)
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := microseconds(in)
		if err != nil {
			return
		}
		var resp ttrpc.Response
		if err := proto.Unmarshal(out, &resp); err != nil {
			t.Fatalf("rewritten to something that is no ttrpc response: %v", err)
		}
	})
}
