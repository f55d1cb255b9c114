package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// The kinds of frame. A frame is its kind (one byte), the payload's
// length (4 bytes, big-endian) and the payload.
const (
	frameJob    = 'j' // host to guest: the job, as JSON; a run job's binary follows, unframed
	frameOutput = 'o' // guest to host: the binary's output (stdout and stderr), as it came
	frameExit   = 'x' // guest to host: the binary's exit status, in decimal; the last frame
)

// maxFrame bounds a frame's payload: output comes in pipe reads (64 KiB
// at most) and a job is a few hundred bytes. The binary is no frame.
const maxFrame = 1 << 20

// job is what the host asks of the guest.
type job struct {
	Op    string   `json:"op"`              // "run", "ping" or "poweroff"
	Dir   string   `json:"dir,omitempty"`   // run: the package's directory, relative to the repository's root
	Args  []string `json:"args,omitempty"`  // run: the test binary's arguments
	Limit int      `json:"limit,omitempty"` // run: seconds the binary may run before the watchdog kills it
	Size  int64    `json:"size,omitempty"`  // run: the length of the binary, whose bytes follow the frame
}

// writeFrame writes one frame.
func writeFrame(w io.Writer, kind byte, payload []byte) error {
	if len(payload) > maxFrame {
		return fmt.Errorf("frame of %d bytes, more than %d", len(payload), maxFrame)
	}
	b := make([]byte, 5, 5+len(payload))
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	_, err := w.Write(append(b, payload...))
	return err
}

// readFrame reads one frame. A stream that ends between frames gives
// io.EOF, one that ends inside a frame io.ErrUnexpectedEOF.
func readFrame(r io.Reader) (kind byte, payload []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	switch h[0] {
	case frameJob, frameOutput, frameExit:
	default:
		return 0, nil, fmt.Errorf("frame of unknown kind %q", h[0])
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes, more than %d", n, maxFrame)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return h[0], payload, nil
}

// writeJob sends a job's frame.
func writeJob(w io.Writer, j job) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return writeFrame(w, frameJob, b)
}

// readJob reads a job's frame.
func readJob(r io.Reader) (job, error) {
	var j job
	kind, payload, err := readFrame(r)
	if err != nil {
		return j, err
	}
	if kind != frameJob {
		return j, fmt.Errorf("a %q frame where a job was due", kind)
	}
	err = json.Unmarshal(payload, &j)
	return j, err
}

// writeExit sends the exit frame.
func writeExit(w io.Writer, status int) error {
	return writeFrame(w, frameExit, []byte(strconv.Itoa(status)))
}

// parseExit reads an exit frame's status: 0 to 255, as a process's.
func parseExit(payload []byte) (int, error) {
	status, err := strconv.Atoi(string(payload))
	if err != nil || status < 0 || status > 255 {
		return 0, fmt.Errorf("exit frame %q: not a status", payload)
	}
	return status, nil
}

// idleConn is a connection on which every read and write must make
// progress within idle: each call sets its deadline afresh, so the bound
// is on silence, not on the whole exchange.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c idleConn) Read(b []byte) (int, error) {
	if err := c.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c idleConn) Write(b []byte) (int, error) {
	if err := c.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// isTimeout says whether err is a deadline's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
