// Package failpoint marks the steps of cgwarden where a crash, a panic or a
// stall matters (a journal append, the middle of a move, a weight written
// but not yet recorded, a revert step), so that tests can fault the agent
// exactly there.
//
// A failpoint is a call, Hit("journal/before-append"), at the step. In the
// default build Hit is an empty function the compiler inlines away: the
// shipped binary and image hold no failpoint, and no environment variable
// can make one fire. Built with the tag `failpoints` (go test -tags
// failpoints), Hit reads CGWARDEN_FAILPOINTS once, a list of
//
//	point=action[@k]
//
// separated by ';', where action is
//
//	panic           panic at the point
//	kill            SIGKILL the process itself (no deferred call runs)
//	stall=DURATION  sleep (time.ParseDuration), then go on
//	skip            Hit returns true: the caller skips its step (only
//	                where the call site says so; the suite's deliberately
//	                broken build drops a journal append this way)
//
// and @k fires on the k-th hit of the point only (default: the first), @*
// on every hit.
// Before it acts, a firing point writes "cgwarden failpoint POINT: ACTION"
// to standard error, so that the test that started the process knows
// where it stopped. CGWARDEN_FAILPOINTS_FILE names a file of more terms
// (';' or one a line), which the process that reads it removes: it arms
// one process only, so that a test can fault the next start of a
// container whose restarts would otherwise fire the same point again and
// again. CGWARDEN_FAILPOINT_TRACE names a file to which every
// hit of every point is appended, one name a line: a test learns from a
// clean run how often each point is reached, and picks k from that.
//
// etcd's gofail (go.etcd.io/gofail) and pingcap/failpoint are the
// libraries for this; neither fits: both rewrite the source in place
// (`gofail enable`, `failpoint-ctl enable`) before a build and back after,
// which does not go with one source tree and one build cache shared by
// every lane, and neither can SIGKILL the process (gofail's terms are
// off, return, sleep, panic, break and print) or fire on the k-th hit
// only (gofail's "k*action" fires on the first k). A build tag and one
// function are the whole of what is needed.
package failpoint
