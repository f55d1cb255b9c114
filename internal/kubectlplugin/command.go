package kubectlplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/answerproof"
	"github.com/cgwarden/cgwarden/internal/inspect"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// Defaults: where deploy/kustomize/base and the chart put the agent, and
// the port of its --local-listen.
const (
	DefaultAgentNamespace = "cgwarden-system"
	DefaultAgentSelector  = "app.kubernetes.io/name=cgwarden"
	DefaultAgentPort      = 9531
)

// Options are the plugin's flags.
type Options struct {
	Node           string
	AllNamespaces  bool
	Output         string
	AgentNamespace string
	AgentSelector  string
	AgentPort      int
	AgentReader    string
	Timeout        time.Duration
	Parallel       int

	Prometheus        string
	PrometheusService string
	PrometheusJob     string

	loading   *clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
	// opener reaches the agents; nil: a port-forward through the API
	// server to each.
	opener Opener
}

// NewRoot is `kubectl cgwarden` with its audit and inspect commands.
func NewRoot(out, errOut io.Writer) *cobra.Command { return NewRootWith(out, errOut, nil) }

// NewRootWith is NewRoot reaching the agents it finds through op instead
// of a port-forward each (nil: the port-forward): everything else — the
// agent pods listed through the API server, -n's pod LIST, --parallel,
// --timeout, the tables and the summary — is the command's. The scale
// lane's simulated agents listen on loopback, where no API server
// forwards.
func NewRootWith(out, errOut io.Writer, op Opener) *cobra.Command {
	o := &Options{loading: clientcmd.NewDefaultClientConfigLoadingRules(), opener: op}
	root := &cobra.Command{
		Use:           "kubectl-cgwarden",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl cgwarden"},
		Short:         "cgwarden's audit and inventory of every node, from each node's agent, in one table",
		Long:          "kubectl cgwarden reads each node's cgwarden agent through the API server (pods/portforward to the agent pod, and a token for the agent alone, minted by the API server with your credentials, which never leave it) and shows every node in one table, or one JSON document with -o json.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	f := root.PersistentFlags()
	f.StringVar(&o.Node, "node", "", "only this node")
	f.BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "show the pods of every namespace (and, in audit, findings about no pod: QoS tiers, host cgroups)")
	f.StringVarP(&o.Output, "output", "o", "table", "table or json (one document: every node's report as cgwarden audit|inspect -o json writes it)")
	f.StringVar(&o.AgentNamespace, "agent-namespace", DefaultAgentNamespace, "namespace of the cgwarden agent's DaemonSet")
	f.StringVar(&o.AgentSelector, "agent-selector", DefaultAgentSelector, "label selector of the agent's pods")
	f.IntVar(&o.AgentPort, "agent-port", DefaultAgentPort, "the agent's --local-listen port (in its pod)")
	f.StringVar(&o.AgentReader, "agent-reader", answerproof.DefaultReader, "the ServiceAccount, in --agent-namespace, whose token (audience "+answerproof.ReaderAudience+", bound to the node) the agent takes: the agent's --local-reader")
	f.DurationVar(&o.Timeout, "timeout", 30*time.Second, "per node: the port-forward's dial, the request and the whole answer (a node past it is reported, the others are not held up); with --prometheus, the query")
	f.IntVar(&o.Parallel, "parallel", DefaultParallel, "how many nodes are asked at once (each a port-forward through the API server)")
	f.StringVar(&o.Prometheus, "prometheus", "", "read the fleet from the Prometheus at this `URL` (one query; the agents' series as last scraped) instead of a port-forward per node")
	f.StringVar(&o.PrometheusService, "prometheus-service", "", "as --prometheus, through the API server's service proxy to `NAMESPACE/[SCHEME:]NAME:PORT` with your kubeconfig's credentials (get and create on services/proxy there)")
	f.StringVar(&o.PrometheusJob, "prometheus-job", DefaultPrometheusJob, "with --prometheus: the job the agents are scraped as")
	f.StringVar(&o.loading.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	clientcmd.BindOverrideFlags(&o.overrides, f, clientcmd.RecommendedConfigOverrideFlags(""))
	for _, k := range []kind{auditKind, inspectKind} {
		root.AddCommand(newReportCommand(o, k))
	}
	return root
}

// Main runs the plugin and returns its exit code: 0, or 1 when it failed
// or a node could not be read (the others are still shown).
func Main(args []string, out, errOut io.Writer) int {
	root := NewRoot(out, errOut)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(errOut, "error:", err)
		return 1
	}
	return 0
}

// kind is audit or inspect: the agent's path and what is done with it.
type kind struct {
	name, path, short string
}

var (
	auditKind   = kind{"audit", "/audit", "Every node's findings: what is wrong with the pods' cgroups, with the numbers"}
	inspectKind = kind{"inspect", "/inspect", "Every node's pods: weights, guaranteed and used CPU, memory, misplaced containers"}
)

func newReportCommand(o *Options, k kind) *cobra.Command {
	return &cobra.Command{
		Use:   k.name,
		Short: k.short,
		Example: "  kubectl cgwarden " + k.name + " -A\n  kubectl cgwarden " + k.name + " -n default --node worker-1\n" +
			"  kubectl cgwarden " + k.name + " -A -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), k)
		},
	}
}

// checkFlags checks the flags alone.
func (o *Options) checkFlags() error {
	if o.Output != "table" && o.Output != "json" {
		return fmt.Errorf("-o %q: want table or json", o.Output)
	}
	if o.AgentPort < 1 || o.AgentPort > 65535 {
		return fmt.Errorf("--agent-port %d: want 1-65535", o.AgentPort)
	}
	if o.Timeout <= 0 {
		return errors.New("--timeout must be above 0")
	}
	if o.AgentReader == "" {
		return errors.New("--agent-reader must not be empty")
	}
	if o.Parallel < 1 {
		return fmt.Errorf("--parallel %d: want 1 or more", o.Parallel)
	}
	if o.Prometheus != "" && o.PrometheusService != "" {
		return errors.New("--prometheus and --prometheus-service: give one")
	}
	if o.Prometheus != "" {
		if u, err := url.Parse(o.Prometheus); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--prometheus %q: want an http or https URL", o.Prometheus)
		}
	}
	if o.PrometheusService != "" {
		ns, svc, ok := strings.Cut(o.PrometheusService, "/")
		if !ok || ns == "" || svc == "" || strings.Contains(svc, "/") {
			return fmt.Errorf("--prometheus-service %q: want NAMESPACE/NAME:PORT (e.g. monitoring/prometheus-k8s:web)", o.PrometheusService)
		}
	}
	if (o.Prometheus != "" || o.PrometheusService != "") && o.PrometheusJob == "" {
		return errors.New("--prometheus-job must not be empty")
	}
	return nil
}

// selection is the pods to show: -A, else the namespace of -n or of the
// kubeconfig's context.
func (o *Options) selection(cc clientcmd.ClientConfig) (selection, error) {
	if o.AllNamespaces {
		return selection{all: true}, nil
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return selection{}, fmt.Errorf("kubeconfig: %w", err)
	}
	return selection{namespace: ns}, nil
}

// run asks every agent, or Prometheus, and writes one table or document.
func (o *Options) run(ctx context.Context, out, errOut io.Writer, k kind) error {
	if err := o.checkFlags(); err != nil {
		return err
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loading, &o.overrides)
	sel, err := o.selection(cc)
	if err != nil {
		return err
	}
	if o.Prometheus != "" || o.PrometheusService != "" {
		return o.runPrometheus(ctx, out, errOut, cc, sel, k)
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// No client-side rate limit (client-go's default is 5 requests a
	// second): each node costs two API calls (its reader token, the
	// review of its answer token), made one after the other by each of
	// the --parallel workers, so at most --parallel are in flight; the
	// API server's priority and fairness sheds what it cannot take. At 5
	// a second, 800 nodes would wait over five minutes on the limiter.
	cfg.QPS = -1
	core, err := v1.NewForConfig(cfg)
	if err != nil {
		return err
	}
	agents, err := findAgents(ctx, core, o)
	if err != nil {
		return err
	}
	if !sel.all && o.Node == "" {
		if agents, err = namespaceAgents(ctx, errOut, core, agents, sel.namespace); err != nil {
			return err
		}
	}
	authn, err := authnclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	prover := apiProver{core: core, authn: authn, reader: o.AgentReader}
	var op Opener = portForward{cfg: cfg, core: core, port: o.AgentPort}
	if o.opener != nil {
		op = o.opener
	}
	results := FetchAll(ctx, agents, op,
		FetchOptions{Path: k.path, Prover: prover, Parallel: o.Parallel, Timeout: o.Timeout, Port: o.AgentPort})
	doc, failed := o.render(results, sel, k)
	if k == auditKind && o.Output != "json" {
		fillRuntimes(ctx, errOut, core, doc.audits)
	}
	for _, n := range doc.Nodes {
		if n.Error != "" {
			fmt.Fprintf(errOut, "node %s: %s\n", n.Name, n.Error)
		}
	}
	if err := o.write(out, doc, k); err != nil {
		return err
	}
	summary := Summarize(results, failed)
	if failed > 0 {
		return errors.New(summary)
	}
	fmt.Fprintln(errOut, summary)
	return nil
}

// namespaceAgents keeps the agents of the nodes that run pods of ns (one
// pod LIST in ns). A user who may not list pods there is told, and every
// agent is asked, as before.
func namespaceAgents(ctx context.Context, errOut io.Writer, core v1.PodsGetter, agents []Agent, ns string) ([]Agent, error) {
	nodes, err := nodesOfNamespace(ctx, core, ns)
	if apierrors.IsForbidden(err) {
		fmt.Fprintf(errOut, "%v\nasking every node's agent instead (allow list on pods in %s to ask only the nodes that run them)\n", err, ns)
		return agents, nil
	}
	if err != nil {
		return nil, err
	}
	kept := onNodes(agents, nodes)
	var without []string
	for n := range nodes {
		if !slices.ContainsFunc(kept, func(a Agent) bool { return a.Node == n }) {
			without = append(without, n)
		}
	}
	sort.Strings(without)
	fmt.Fprintf(errOut, "namespace %s has running pods on %d nodes: asking %d of %d agents\n", ns, len(nodes), len(kept), len(agents))
	if len(without) > 0 {
		if len(without) > 10 {
			without = append(without[:10], "…")
		}
		fmt.Fprintf(errOut, "no running cgwarden agent on %d of those nodes: %s\n", len(nodes)-len(kept), strings.Join(without, ", "))
	}
	return kept, nil
}

// Summarize is the line that ends every run: how many nodes answered, and
// of those that did not, how many ran out of --timeout.
func Summarize(results []Result, failed int) string {
	timedOut := 0
	for _, r := range results {
		var te *TimeoutError
		if errors.As(r.Err, &te) {
			timedOut++
		}
	}
	s := fmt.Sprintf("%d of %d nodes answered", len(results)-failed, len(results))
	if failed > 0 {
		s += fmt.Sprintf("; %d gave no answer within --timeout, %d failed otherwise (each named above)", timedOut, failed-timedOut)
	}
	return s
}

// ClusterReport is -o json: every node's report, as `cgwarden audit -o
// json` or `cgwarden inspect -o json` writes it for that node (pods
// selected), or why the node could not be read.
type ClusterReport struct {
	Kind  string       `json:"kind"`
	Nodes []NodeReport `json:"nodes"`

	audits   []nodeAudit
	inspects []nodeInspect
}

// NodeReport is one node's part of ClusterReport.
type NodeReport struct {
	Name     string          `json:"name"`
	AgentPod string          `json:"agentPod"`
	Report   json.RawMessage `json:"report,omitempty"`
	Error    string          `json:"error,omitempty"`
}

type nodeAudit struct {
	name     string
	findings []finding
	// node is the audit's node header; nil when the agent sent none.
	node *inspect.NodeJSON
}

type nodeInspect struct {
	name string
	pods []inspect.PodJSON
}
