// Package audit turns a node's inventory into findings: what is wrong with
// the pods' cgroups, the numbers that show it, what it breaks in the
// user's words, and how to fix it.
//
// Each rule lives in its own file and reads an Input (the scanned node,
// the pod and VM metadata when given, the thresholds). Rules never guess:
// a rule that needs a pod's size, its requests or two samples and does not
// have them adds a Note saying what is missing instead of a finding.
// Run applies every rule and sorts the findings by severity, then by the
// rule order of Rules, then by subject, so the output is stable and the
// most urgent problem comes first.
//
// The rules are explained for people, with examples from the seeds, in
// docs/findings.md.
package audit
