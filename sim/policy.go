package sim

import (
	"fmt"
	"strings"
)

// PolicyNames are the policies Run knows, in the order tables list them:
// the baselines, then ours.
func PolicyNames() []string {
	return []string{"time-sharing", "fast-gshare", "lb", "lalb", "lalb-o3", "faas-gpu"}
}

func newPolicy(name string) (policy, error) {
	switch name {
	case "time-sharing":
		return &fastFamily{timeSharing: true}, nil
	case "fast-gshare":
		return &fastFamily{}, nil
	case "lb":
		return newLBFamily(dispatchLB), nil
	case "lalb":
		return newLBFamily(dispatchLALB), nil
	case "lalb-o3":
		return newLBFamily(dispatchO3), nil
	case "faas-gpu":
		return &faasGPU{}, nil
	}
	return nil, fmt.Errorf("unknown policy %q (known: %s)", name, strings.Join(PolicyNames(), ", "))
}

// ParsePolicies reads a comma-separated list ("all": every policy).
func ParsePolicies(s string) ([]string, error) {
	if strings.TrimSpace(s) == "all" || strings.TrimSpace(s) == "" {
		return PolicyNames(), nil
	}
	var out []string
	seen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if _, err := newPolicy(name); err != nil {
			return nil, err
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out, nil
}
