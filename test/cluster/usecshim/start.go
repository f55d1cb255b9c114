package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"google.golang.org/protobuf/proto"
)

// start runs the real shim's start with this process's arguments, input
// and environment, puts a proxy in front of the socket it answers with
// (or finds the one already there: a pod's containers share their
// sandbox's shim) and writes the real answer with the proxy's address,
// in the encoding the real shim used.
func start(real string) error {
	cmd := exec.Command(real, os.Args[1:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s start: %w", real, err)
	}
	res, asJSON, err := parseStart(out)
	if err != nil {
		return err
	}
	upstream, ok := strings.CutPrefix(res.Address, "unix://")
	if !ok {
		return fmt.Errorf("%s answered %q: not a unix socket", real, res.Address)
	}
	listen := upstream + ".usec"
	if !answers(listen) {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		proxy := exec.Command(self, "serve", upstream, listen)
		proxy.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := proxy.Start(); err != nil {
			return err
		}
		deadline := time.Now().Add(5 * time.Second)
		for !answers(listen) {
			if time.Now().After(deadline) {
				proxy.Process.Kill()
				return fmt.Errorf("the proxy for %s did not listen on %s in 5s", upstream, listen)
			}
			time.Sleep(20 * time.Millisecond)
		}
		proxy.Process.Release()
	}
	res.Address = "unix://" + listen
	if asJSON {
		out, err = json.Marshal(res)
	} else {
		out, err = proto.Marshal(res)
	}
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}

// parseStart reads a shim's start answer as containerd does
// (core/runtime/v2 parseStartResponse): a BootstrapResult in protobuf, or
// in JSON from older shims.
func parseStart(out []byte) (res *bootapi.BootstrapResult, asJSON bool, err error) {
	res = &bootapi.BootstrapResult{}
	if err := proto.Unmarshal(out, res); err == nil && res.Address != "" {
		return res, false, nil
	}
	res = &bootapi.BootstrapResult{}
	if err := json.Unmarshal(bytes.TrimSpace(out), res); err != nil || res.Address == "" {
		return nil, false, fmt.Errorf("the real shim's start answered %q, which is no bootstrap result", out)
	}
	return res, true, nil
}

// answers reports whether something accepts connections on the socket.
func answers(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
