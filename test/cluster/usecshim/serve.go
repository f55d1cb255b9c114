package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1/stats"
	taskapi "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/proto"
)

// ttrpc's framing (github.com/containerd/ttrpc channel.go): a 10-byte
// header (the payload's length and the stream's ID, big-endian; the
// message type; flags), then the payload, at most 4 MiB.
const (
	headerLength  = 10
	maxPayload    = 4 << 20
	typeRequest   = 1
	typeResponse  = 2
	v1MetricsType = "io.containerd.cgroups.v1.Metrics"
)

type frame struct {
	stream  uint32
	typ     byte
	flags   byte
	payload []byte
}

func readFrame(r io.Reader) (frame, error) {
	var h [headerLength]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(h[0:4])
	if n > maxPayload {
		return frame{}, fmt.Errorf("a ttrpc message of %d bytes, over the %d the protocol allows", n, maxPayload)
	}
	f := frame{stream: binary.BigEndian.Uint32(h[4:8]), typ: h[8], flags: h[9], payload: make([]byte, n)}
	_, err := io.ReadFull(r, f.payload)
	return f, err
}

func writeFrame(w io.Writer, f frame) error {
	var h [headerLength]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(len(f.payload)))
	binary.BigEndian.PutUint32(h[4:8], f.stream)
	h[8], h[9] = f.typ, f.flags
	_, err := w.Write(append(h[:], f.payload...))
	return err
}

// serve listens on listen and passes each connection through to
// upstream, rewriting the answers to Task.Stats; it ends when upstream
// stops answering (the real shim exited).
func serve(upstream, listen string) error {
	os.Remove(listen)
	l, err := net.Listen("unix", listen)
	if err != nil {
		return err
	}
	go func() {
		for answers(upstream) {
			time.Sleep(2 * time.Second)
		}
		l.Close()
	}()
	defer os.Remove(listen)
	for {
		c, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		u, err := net.Dial("unix", upstream)
		if err != nil {
			c.Close()
			continue
		}
		go proxy(c, u)
	}
}

// proxy pumps one connection both ways; the answers on the streams of
// Task.Stats requests are rewritten.
func proxy(client, upstream net.Conn) {
	var mu sync.Mutex
	stats := map[uint32]bool{}
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		for {
			f, err := readFrame(client)
			if err != nil {
				return
			}
			if f.typ == typeRequest && isStats(f.payload) {
				mu.Lock()
				stats[f.stream] = true
				mu.Unlock()
			}
			if writeFrame(upstream, f) != nil {
				return
			}
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		for {
			f, err := readFrame(upstream)
			if err != nil {
				return
			}
			mu.Lock()
			rewrite := f.typ == typeResponse && stats[f.stream]
			delete(stats, f.stream)
			mu.Unlock()
			if rewrite {
				if p, err := microseconds(f.payload); err == nil {
					f.payload = p
				}
			}
			if writeFrame(client, f) != nil {
				return
			}
		}
	}()
	<-done
	client.Close()
	upstream.Close()
	<-done
}

// isStats reports whether a ttrpc request is a task service's Stats.
func isStats(payload []byte) bool {
	var req ttrpc.Request
	if proto.Unmarshal(payload, &req) != nil {
		return false
	}
	return req.Method == "Stats" && strings.HasPrefix(req.Service, "containerd.task.v")
}

// microseconds rewrites a ttrpc response to Task.Stats: the cgroup v1
// metrics' CPU usage (total, kernel, user, per CPU), in nanoseconds, in
// microseconds instead. Any other answer comes back unchanged.
func microseconds(payload []byte) ([]byte, error) {
	var resp ttrpc.Response
	if err := proto.Unmarshal(payload, &resp); err != nil {
		return nil, err
	}
	if resp.Status != nil && resp.Status.Code != 0 {
		return payload, nil
	}
	var sr taskapi.StatsResponse
	if err := proto.Unmarshal(resp.Payload, &sr); err != nil {
		return nil, err
	}
	if sr.Stats == nil || !strings.HasSuffix(sr.Stats.TypeUrl, v1MetricsType) {
		return payload, nil
	}
	var m stats.Metrics
	if err := proto.Unmarshal(sr.Stats.Value, &m); err != nil {
		return nil, err
	}
	if u := m.GetCPU().GetUsage(); u != nil {
		u.Total, u.Kernel, u.User = u.Total/1000, u.Kernel/1000, u.User/1000
		for i := range u.PerCPU {
			u.PerCPU[i] /= 1000
		}
	}
	v, err := proto.Marshal(&m)
	if err != nil {
		return nil, err
	}
	sr.Stats.Value = v
	if resp.Payload, err = proto.Marshal(&sr); err != nil {
		return nil, err
	}
	return proto.Marshal(&resp)
}
