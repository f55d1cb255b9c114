package sizercmd

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/cgwarden/cgwarden/internal/sizer"
)

// newCA is `cgwarden-sizer ca`: the install step that makes the sizer's CA
// for a kustomize install (the Helm chart makes its own).
func newCA() *cobra.Command {
	var namespace, secret, webhook, dir string
	var force bool
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Make the sizer's CA for a kustomize install: its Secret and the webhook's caBundle, as a kustomize Component",
		Long: `cgwarden-sizer ca makes a new CA (10 years) and writes into --out-dir a kustomize Component with the
Secret that keeps it (--ca-secret in --namespace) and a patch setting the caBundle of the sizer's
MutatingWebhookConfiguration to it. Add the directory to the components of the overlay that installs
deploy/kustomize/sizer (docs/sizing.md).

The sizer signs its serving certificates with this CA and only reads the Secret: it holds no
permission on its webhook configuration, so what the API server trusts is set here, at install, and
changed only by running this again and applying the overlay. secret.yaml holds the CA's private key.`,
		Example: `  cgwarden-sizer ca --out-dir overlays/prod/sizer-ca
  docker run --rm -u "$(id -u)" -v "$PWD/sizer-ca:/out" --entrypoint /cgwarden-sizer ghcr.io/cgwarden/cgwarden:TAG ca --out-dir /out`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			files, err := sizer.CAComponent(namespace, secret, webhook, time.Now())
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			names := slices.Sorted(maps.Keys(files))
			if !force {
				for _, n := range names {
					if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
						return fmt.Errorf("%s exists: a new CA replaces what the API server trusts; give --force to make one", filepath.Join(dir, n))
					}
				}
			}
			for _, n := range names {
				// 0600: secret.yaml holds the CA's key.
				if err := os.WriteFile(filepath.Join(dir, n), files[n], 0o600); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), filepath.Join(dir, n))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "out-dir", "", "the `DIR` to write the Component into (made if absent)")
	f.StringVar(&namespace, "namespace", "cgwarden-sizer", "the sizer's `NAMESPACE`")
	f.StringVar(&secret, "ca-secret", "cgwarden-sizer-ca", "the CA Secret's `NAME` (the sizer's --ca-secret)")
	f.StringVar(&webhook, "webhook-config", "cgwarden-sizer", "the sizer's MutatingWebhookConfiguration `NAME`")
	f.BoolVar(&force, "force", false, "overwrite an existing Component (a new CA)")
	_ = cmd.MarkFlagRequired("out-dir")
	return cmd
}
