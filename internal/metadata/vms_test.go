package metadata

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/cgwarden/cgwarden/internal/vmsize"
)

func TestParseVMs(t *testing.T) {
	cases := []struct {
		name, in string
		want     []VM
		err      string
	}{
		{name: "neonvm list, string and number quantities", in: `{"apiVersion":"v1","kind":"List","items":[
			{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"a","namespace":"default"},
			 "spec":{"guest":{"cpus":{"min":"250m","max":1,"use":"250m"}}},"status":{"podName":"a-x1"}},
			{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"b","namespace":"ns"},
			 "spec":{"guest":{"cpus":{"min":0.25,"max":4}}}},
			{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"c","namespace":"ns"},
			 "spec":{"guest":{"cpus":{"min":"2"}}}}]}`,
			want: []VM{{Kind: "neonvm", Namespace: "default", Name: "a", MilliCPU: 250, PodLabel: vmsize.LabelNeonVM, PodName: "a-x1"}, {Kind: "neonvm", Namespace: "ns", Name: "b", MilliCPU: 4000, PodLabel: vmsize.LabelNeonVM},
				{Kind: "neonvm", Namespace: "ns", Name: "c", MilliCPU: 2000, PodLabel: vmsize.LabelNeonVM}}},
		{name: "kubevirt VMI list, defaults of 1", in: `{"kind":"VirtualMachineInstanceList","items":[
			{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"big","namespace":"vms"},
			 "spec":{"domain":{"cpu":{"sockets":2,"cores":4,"threads":2}}},"status":{"activePods":{"u-old":"n1","u-big":"n2"}}},
			{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"tiny","namespace":"vms"},
			 "spec":{"domain":{}}}]}`,
			want: []VM{{Kind: "kubevirt", Namespace: "vms", Name: "big", MilliCPU: 16000, PodLabel: vmsize.LabelKubeVirt, PodUIDs: []string{"u-big", "u-old"}}, {Kind: "kubevirt", Namespace: "vms", Name: "tiny", MilliCPU: 1000, PodLabel: vmsize.LabelKubeVirt}}},
		{name: "single object", in: `{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"s","namespace":"d"},"spec":{"guest":{"cpus":{"use":"1500m"}}}}`,
			want: []VM{{Kind: "neonvm", Namespace: "d", Name: "s", MilliCPU: 1500, PodLabel: vmsize.LabelNeonVM}}},
		{name: "not json", in: `kind: List`, err: "not a JSON object"},
		{name: "list without items", in: `{"kind":"List"}`, err: "without items"},
		{name: "item not object", in: `{"kind":"List","items":[3]}`, err: "item 0 is not an object"},
		{name: "other kind", in: `{"kind":"List","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}]}`, err: "neither a NeonVM"},
		{name: "no name", in: `{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","spec":{"guest":{"cpus":{"use":1}}}}`, err: "no metadata.name"},
		{name: "no cpus", in: `{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"x"},"spec":{"guest":{}}}`, err: "no spec.guest.cpus"},
		{name: "bad quantity", in: `{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"x"},"spec":{"guest":{"cpus":{"use":"lots"}}}}`, err: "spec.guest.cpus.use"},
		{name: "negative", in: `{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"x"},"spec":{"guest":{"cpus":{"use":-1}}}}`, err: "negative"},
		{name: "zero", in: `{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"x"},"spec":{"guest":{"cpus":{"use":0}}}}`, err: "must be above 0"},
		{name: "fractional sockets", in: `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"x"},"spec":{"domain":{"cpu":{"cores":1.5}}}}`, err: "whole number"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseVMs(strings.NewReader(c.in))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %d VMs, want %d: %+v", len(got), len(c.want), got)
			}
			for i := range got {
				if !got[i].Equal(c.want[i]) {
					t.Errorf("VM %d = %+v, want %+v", i, got[i], c.want[i])
				}
			}
		})
	}
}

func TestApplyVMs(t *testing.T) {
	s := NewSet([]Pod{
		{UID: "u1", Name: "a-x1", Namespace: "default", Labels: map[string]string{vmsize.LabelNeonVM: "a"}},
		{UID: "u2", Name: "b-runner", Namespace: "ns", Labels: map[string]string{vmsize.LabelNeonVM: "b"}},
		{UID: "u3", Name: "b-runner", Namespace: "other", Labels: map[string]string{vmsize.LabelNeonVM: "b"}},
		{UID: "u4", Name: "c-pod", Namespace: "ns"},
		{UID: "u5", Name: "virt-launcher-big-abcde", Namespace: "vms", Labels: map[string]string{vmsize.LabelKubeVirt: "big"}},
	})
	un := s.ApplyVMs([]VM{
		{Kind: "neonvm", Namespace: "default", Name: "a", MilliCPU: 250, PodLabel: vmsize.LabelNeonVM},
		{Kind: "neonvm", Namespace: "ns", Name: "b", MilliCPU: 4000, PodLabel: vmsize.LabelNeonVM},
		{Kind: "neonvm", Namespace: "ns", Name: "c", MilliCPU: 1000, PodLabel: vmsize.LabelNeonVM, PodName: "c-pod"}, // found by status.podName
		{Kind: "kubevirt", Namespace: "vms", Name: "big", MilliCPU: 16000, PodLabel: vmsize.LabelKubeVirt, PodUIDs: []string{"u-big", "u-old"}},
		{Kind: "neonvm", Namespace: "ns", Name: "gone", MilliCPU: 1000, PodLabel: vmsize.LabelNeonVM},
	})
	if len(un) != 1 || un[0].Name != "gone" {
		t.Fatalf("unmatched = %+v, want only gone", un)
	}
	for uid, want := range map[string]Size{"u1": {250, "neonvm"}, "u2": {4000, "neonvm"}, "u4": {1000, "neonvm"}, "u5": {16000, "kubevirt"}} {
		if got, ok := s.Size(uid); !ok || got != want {
			t.Errorf("Size(%s) = %+v %v, want %+v", uid, got, ok, want)
		}
	}
	if sz, ok := s.Size("u3"); ok {
		t.Errorf("pod in another namespace got size %+v", sz)
	}
	// A live source's trust: only the pod a VM's status names is sized.
	s.SetTrust(Trust{})
	for _, uid := range []string{"u1", "u2", "u5"} {
		if sz, ok, err := s.DeclaredSize(uid); ok || err == nil || !strings.Contains(err.Error(), "not believed") {
			t.Errorf("live trust: %s claims its VM by label only: %+v %v %v", uid, sz, ok, err)
		}
	}
	if sz, ok, err := s.DeclaredSize("u4"); !ok || err != nil || sz.MilliCPU != 1000 {
		t.Errorf("live trust: the pod c's status names: %+v %v %v", sz, ok, err)
	}
}

// TestSeed000VMsFile reads the example VMs file shipped beside the seed-000
// snapshot and ties every VM to its runner pod in the pods file.
func TestSeed000VMsFile(t *testing.T) {
	pf, err := os.Open("../examples/snapshots/seed-000-eks-neonvm.pods.json")
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	pods, err := ParsePods(pf)
	if err != nil {
		t.Fatal(err)
	}
	vf, err := os.Open("../examples/snapshots/seed-000-eks-neonvm.vms.json")
	if err != nil {
		t.Fatal(err)
	}
	defer vf.Close()
	vms, err := ParseVMs(vf)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSet(pods)
	if un := s.ApplyVMs(vms); len(un) != 0 {
		t.Fatalf("VMs without a runner pod: %+v", un)
	}
	got := map[int64]bool{}
	for _, vm := range vms {
		got[vm.MilliCPU] = true
	}
	for _, m := range []int64{250, 1000, 4000} {
		if !got[m] {
			t.Errorf("no VM of %dm in the seed's VMs file (have %v)", m, got)
		}
	}
}

func FuzzParseVMs(f *testing.F) {
	f.Add(`{"kind":"List","items":[{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"a"},"spec":{"guest":{"cpus":{"use":"250m"}}}}]}`)
	f.Add(`{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"x"},"spec":{"domain":{"cpu":{"cores":3}}}}`)
	f.Add(`{"kind":"List","items":[null]}`)
	f.Add(`{"apiVersion":"vm.neon.tech/v1","kind":"VirtualMachine","metadata":{"name":"x"},"spec":{"guest":{"cpus":{"use":1e300}}}}`)
	f.Fuzz(func(t *testing.T, in string) {
		vms, err := ParseVMs(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, vm := range vms {
			if vm.MilliCPU <= 0 || vm.Name == "" || (vm.Kind != "neonvm" && vm.Kind != "kubevirt") {
				t.Fatalf("accepted a VM that makes no sense: %+v", vm)
			}
		}
	})
}

// TestRunnerVMSize reads a NeonVM runner pod's -vmspec argument, as the
// NeonVM controller writes it (whether it is believed is Origin's
// business: TestOrigin).
func TestRunnerVMSize(t *testing.T) {
	mk := func(label bool, argv ...string) string {
		labels := ""
		if label {
			labels = `"labels":{"vm.neon.tech/name":"vm1"},`
		}
		cmd, _ := json.Marshal(argv)
		return `{"kind":"List","items":[{"kind":"Pod","metadata":{"name":"vm1-abcde","namespace":"d","uid":"u1",` + labels +
			`"x":1},"spec":{"containers":[{"name":"neonvm-runner","command":` + string(cmd) + `}]},"status":{"qosClass":"BestEffort"}}]}`
	}
	spec := func(js string) string { return base64.StdEncoding.EncodeToString([]byte(js)) }
	cases := []struct {
		name string
		in   string
		want *Size
	}{
		{"use as string", mk(true, "runner", "-vmspec", spec(`{"guest":{"cpus":{"min":"250m","max":"2","use":"500m"}}}`)), &Size{500, "neonvm"}},
		{"max when no use", mk(true, "runner", "-vmspec", spec(`{"guest":{"cpus":{"min":1,"max":4}}}`)), &Size{4000, "neonvm"}},
		{"not a runner", mk(false, "runner", "-vmspec", spec(`{"guest":{"cpus":{"use":4}}}`)), nil},
		{"bad base64", mk(true, "runner", "-vmspec", "!!!"), nil},
		{"bad json", mk(true, "runner", "-vmspec", spec(`{`)), nil},
		{"no flag", mk(true, "runner"), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pods, err := ParsePods(strings.NewReader(c.in))
			if err != nil {
				t.Fatal(err)
			}
			got := pods[0].VMSize
			if c.want == nil {
				if got != nil {
					t.Fatalf("size %+v from a pod that states none", got)
				}
				return
			}
			if got == nil || *got != *c.want {
				t.Fatalf("size = %+v, want %+v", got, *c.want)
			}
		})
	}
}
