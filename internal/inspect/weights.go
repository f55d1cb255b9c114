package inspect

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/cgwarden/cgwarden/internal/weights"
)

// SizedJSON is a sized BestEffort pod's weights: its declared size, its
// weight and its tier's now and at the targets cgwarden's weight fix
// holds, and what it is guaranteed under each (and at the kubelet's
// weights, without cgwarden).
type SizedJSON struct {
	UID                      string  `json:"uid"`
	Name                     string  `json:"name"`
	Namespace                string  `json:"namespace"`
	SizeCores                float64 `json:"sizeCores"`
	SizeSource               string  `json:"sizeSource"`
	Weight                   *uint64 `json:"weight"`
	TargetWeight             uint64  `json:"targetWeight"`
	TierWeight               *uint64 `json:"tierWeight"`
	TargetTierWeight         uint64  `json:"targetTierWeight"`
	GuaranteedCores          float64 `json:"guaranteedCores"`
	GuaranteedCoresAtTarget  float64 `json:"guaranteedCoresAtTarget"`
	GuaranteedCoresAtKubelet float64 `json:"guaranteedCoresAtKubeletWeights"`
}

// Sized turns weight views into their JSON form.
func Sized(views []weights.View) []SizedJSON {
	out := make([]SizedJSON, 0, len(views))
	for _, v := range views {
		out = append(out, SizedJSON{UID: v.Pod.UID, Name: v.Pod.Name, Namespace: v.Pod.Namespace,
			SizeCores: float64(v.MilliCPU) / 1000, SizeSource: v.Source, Weight: v.Weight, TargetWeight: v.Target,
			TierWeight: v.TierWeight, TargetTierWeight: v.TierTarget, GuaranteedCores: v.Guaranteed,
			GuaranteedCoresAtTarget: v.AtTarget, GuaranteedCoresAtKubelet: v.AtKubelet})
	}
	return out
}

// WriteSized writes the sized BestEffort pods' weights as a table after
// the tree: size, weight now → target, the tier's, and the guarantee now
// and at the targets. held says every target is in place.
func WriteSized(w io.Writer, views []weights.View, held bool) error {
	if len(views) == 0 {
		return nil
	}
	head := "\nSized BestEffort pods: weights by size (cgwarden fix --only size-blind-weights,besteffort-starvation):"
	if held {
		head = "\nSized BestEffort pods: weights follow their sizes (held while cgwarden serve --fix runs; the kubelet resets the tier):"
	}
	if _, err := fmt.Fprintln(w, head); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tSIZE (CPUs)\tSOURCE\tWEIGHT\tTARGET\tTIER\tTIER TARGET\tGUARANTEED (cores)\tAT TARGET (cores)")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", podLabel(v.Pod), strconv.FormatFloat(float64(v.MilliCPU)/1000, 'f', -1, 64),
			v.Source, figure(v.Weight, false, decimal), v.Target, figure(v.TierWeight, false, decimal), v.TierTarget, FixedCores(v.Guaranteed), FixedCores(v.AtTarget))
	}
	return tw.Flush()
}
