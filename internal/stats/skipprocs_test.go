package stats

import (
	"reflect"
	"syscall"
	"testing"

	"github.com/cgwarden/cgwarden/internal/mounts"
)

// TestSkipProcsThenReadProcs: a read with SkipProcs followed by ReadProcs
// gives what a plain read gives (the same figures, the same errors, the
// same Gone), and the read alone leaves the process count and, where no
// thread list is read, pids.current unknown; a cgroup with nothing but a
// process list is still found there.
func TestSkipProcsThenReadProcs(t *testing.T) {
	v1 := fixture(t, "v1-root.txtar")
	v1.files["/sys/fs/cgroup/pids/pids.current"] = "12\n"
	empty := mapFS{files: map[string]string{
		// pids.current says empty: the list is not read (it is not
		// even there).
		"/sys/fs/cgroup/pids/x/pids.current": "0\n", "/sys/fs/cgroup/cpu/x/cpu.shares": "2\n",
	}}
	denied := mapFS{files: map[string]string{"/sys/fs/cgroup/cpu/x/cpu.shares": "2\n"}, errs: map[string]error{
		"/sys/fs/cgroup/cpu/x/cgroup.procs": syscall.EACCES, "/sys/fs/cgroup/pids/x/pids.current": syscall.EACCES}}
	for _, tc := range []struct {
		name        string
		fs          mapFS
		places      mounts.Places
		cg          string
		withThreads bool
	}{
		{"v1 root with threads", v1, placesV1, "/", true},
		{"v1 root", v1, placesV1, "/", false},
		{"v2 container", fixture(t, "v2-container.txtar"), placesV2, "/pod/ctr", false},
		{"v1 only a process list", mapFS{files: map[string]string{"/sys/fs/cgroup/cpu/x/cgroup.procs": "12\n"}}, placesV1, "/x", false},
		{"v2 only a process list", mapFS{files: map[string]string{"/sys/fs/cgroup/x/cgroup.procs": "12\n"}}, placesV2, "/x", false},
		{"v1 empty by pids.current", empty, placesV1, "/x", false},
		{"v1 unreadable", denied, placesV1, "/x", false},
		{"v1 gone", mapFS{}, placesV1, "/x", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantErrs := Reader{FS: tc.fs, Places: tc.places}.Read(tc.cg, tc.withThreads)
			r := Reader{FS: tc.fs, Places: tc.places, SkipProcs: true}
			got, errs := r.Read(tc.cg, tc.withThreads)
			if got.Gone != want.Gone {
				t.Fatalf("Gone %v with SkipProcs, %v without", got.Gone, want.Gone)
			}
			if got.Procs != nil && (got.CPU.Weight != nil || got.CPU.UsageNs != nil) {
				t.Errorf("SkipProcs read the process list of a cgroup it found there by other files")
			}
			if !tc.withThreads && got.Pids.Current != nil {
				t.Errorf("SkipProcs read pids.current without a thread list to spare")
			}
			if !got.Gone && got.Procs == nil {
				errs = append(errs, r.ReadProcs(tc.cg, tc.withThreads, &got)...)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("with SkipProcs and ReadProcs:\n%+v\nplain read:\n%+v", got, want)
			}
			if len(errs) != len(wantErrs) {
				t.Errorf("%d errors (%v), want %d (%v)", len(errs), errs, len(wantErrs), wantErrs)
			}
		})
	}
}
