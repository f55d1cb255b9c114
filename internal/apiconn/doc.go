// Package apiconn is cgwarden's connection to the API server: its client
// configuration (RESTConfig), its clients (Client, a REST client of one
// API group version; EventRecorder and EventSink for Events), and what the
// agent's log says about the connection.
//
// The clients are REST clients whose schemes hold their own group version
// only, not client-go's typed clients: every typed client imports
// client-go's whole scheme, whose initialisation costs each process that
// links it about 10 MiB of RSS (Client says more).
//
// The agent keeps working while the API server is away: it serves and
// fixes from its last pod list (the informer's cache). What it must not
// do is fill its log while it waits: client-go's reflector retries its
// list every second or two and logs each failure, and the event
// broadcaster logs each retry of each Event. So:
//
//   - Reach follows, from every request the agent's clients make (a
//     wrapped transport), whether the API server answers, and logs once
//     when it stops answering and once when it answers again (with how
//     long it was away);
//   - RouteKlog sends client-go's own log lines (klog) into the agent's
//     log, drops them while Reach knows the API server is away (they would
//     only repeat what Reach said), and writes any one message at most
//     once per window otherwise, with how many repeats were folded.
package apiconn
