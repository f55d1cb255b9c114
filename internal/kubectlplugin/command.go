package kubectlplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/inspect"
	"k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
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
	Timeout        time.Duration

	loading   *clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
}

// NewRoot is `kubectl cgwarden` with its audit and inspect commands.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	o := &Options{loading: clientcmd.NewDefaultClientConfigLoadingRules()}
	root := &cobra.Command{
		Use:           "kubectl-cgwarden",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl cgwarden"},
		Short:         "cgwarden's audit and inventory of every node, from each node's agent, in one table",
		Long:          "kubectl cgwarden reads each node's cgwarden agent through the API server (pods/portforward to the agent pod, with your own credentials) and shows every node in one table, or one JSON document with -o json.",
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
	f.DurationVar(&o.Timeout, "timeout", 30*time.Second, "per node")
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

// validate checks the flags and returns the client configuration and
// the pods to show.
func (o *Options) validate() (*rest.Config, selection, error) {
	if o.Output != "table" && o.Output != "json" {
		return nil, selection{}, fmt.Errorf("-o %q: want table or json", o.Output)
	}
	if o.AgentPort < 1 || o.AgentPort > 65535 {
		return nil, selection{}, fmt.Errorf("--agent-port %d: want 1-65535", o.AgentPort)
	}
	if o.Timeout <= 0 {
		return nil, selection{}, errors.New("--timeout must be above 0")
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loading, &o.overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, selection{}, fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, selection{}, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, selection{all: o.AllNamespaces, namespace: ns}, nil
}

// run asks every agent and writes one table or document.
func (o *Options) run(ctx context.Context, out, errOut io.Writer, k kind) error {
	cfg, sel, err := o.validate()
	if err != nil {
		return err
	}
	core, err := v1.NewForConfig(cfg)
	if err != nil {
		return err
	}
	agents, err := findAgents(ctx, core, o)
	if err != nil {
		return err
	}
	token, err := bearerToken(cfg)
	if err != nil {
		return err
	}
	results := fetchAll(ctx, cfg, core, agents, o.AgentPort, k.path, token, o.Timeout)
	doc, failed := o.render(results, sel, k)
	for _, n := range doc.Nodes {
		if n.Error != "" {
			fmt.Fprintf(errOut, "node %s: %s\n", n.Name, n.Error)
		}
	}
	if err := o.write(out, doc, k); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d nodes could not be read", failed, len(results))
	}
	return nil
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
}

type nodeInspect struct {
	name string
	pods []inspect.PodJSON
}
