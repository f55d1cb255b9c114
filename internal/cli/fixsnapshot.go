package cli

import (
	"errors"
	"io/fs"
	"path"
	"strings"

	"github.com/cgwarden/cgwarden/internal/cgroupfs"
	"github.com/cgwarden/cgwarden/internal/plan"
)

// warnUnrecorded warns about the operations of a plan made from a
// snapshot that rest on files the snapshot does not record: a controller
// write planned because cgroup.controllers and cgroup.subtree_control are
// missing (snapshots from before cgwarden recorded what fix reads, and
// the embedded examples) may be one the live node does not need.
func (o *Options) warnUnrecorded(fsys cgroupfs.FS, p *plan.Plan) {
	for _, op := range p.Ops {
		if op.Kind != plan.Write || op.File() != "cgroup.subtree_control" {
			continue
		}
		dir := path.Dir(op.Path)
		var missing []string
		for _, f := range []string{"cgroup.controllers", "cgroup.subtree_control"} {
			if _, err := fsys.ReadFile(path.Join(dir, f)); errors.Is(err, fs.ErrNotExist) {
				missing = append(missing, f)
			}
		}
		if len(missing) > 0 {
			o.warnf("snapshot %s does not record %s of %s: the plan enables %s there, which the node may have enabled already",
				o.Snapshot, strings.Join(missing, " and "), dir, op.Value)
		}
	}
}
