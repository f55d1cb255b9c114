package serve

import (
	"encoding/json"
	"net/http"

	"github.com/cgwarden/cgwarden/internal/audit"
	"github.com/cgwarden/cgwarden/internal/inspect"
	"github.com/cgwarden/cgwarden/internal/weights"
)

// The node's audit and inventory as JSON, for `kubectl cgwarden`: the
// documents `cgwarden audit -o json` and `cgwarden inspect -o json` write
// (docs/schemas), made from the scan the agent already keeps by the same
// renderers (audit.Run and audit.JSON, inspect.NewReport), once per scan.
// Neither takes a selection: the plugin selects pods on its side, so one
// rendering serves every caller.

func (st *state) renderAudit() ([]byte, error) {
	return json.Marshal(audit.JSON(st.node, st.auditReport()))
}

func (st *state) renderInspect() ([]byte, error) {
	sized, _ := weights.Views(st.node, st.meta, 0)
	return json.Marshal(inspect.NewReport(st.node, sized))
}

func (s *Server) serveAudit(w http.ResponseWriter, r *http.Request) {
	if st := s.latest(w); st != nil {
		s.write(w, r, "application/json", &st.audit, &st.auditGz, st.renderAudit)
	}
}

func (s *Server) serveInspect(w http.ResponseWriter, r *http.Request) {
	if st := s.latest(w); st != nil {
		s.write(w, r, "application/json", &st.inventory, &st.inventoryGz, st.renderInspect)
	}
}
