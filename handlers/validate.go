package handlers

import (
	"strconv"
	"strings"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// validateDeployment checks a deploy or update request and parses what
// faas-gpu reads from it. Every rejection names the field.
func validateDeployment(dep types.FunctionDeployment) (scheduler.Function, error) {
	if err := validateName("service", dep.Service); err != nil {
		return scheduler.Function{}, err
	}
	if strings.TrimSpace(dep.Image) == "" {
		return scheduler.Function{}, badRequest("image", "is required")
	}
	labels, annotations := mapOf(dep.Labels), mapOf(dep.Annotations)
	for k, v := range labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return scheduler.Function{}, badRequest("labels."+k, "key is not a valid label name: %s", strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return scheduler.Function{}, badRequest("labels."+k, "%q is not a valid label value: %s", v, strings.Join(errs, "; "))
		}
	}
	for k := range annotations {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return scheduler.Function{}, badRequest("annotations."+k, "key is not a valid annotation name: %s", strings.Join(errs, "; "))
		}
	}
	for k := range dep.EnvVars {
		if errs := validation.IsEnvVarName(k); len(errs) > 0 {
			return scheduler.Function{}, badRequest("envVars."+k, "not a valid variable name: %s", strings.Join(errs, "; "))
		}
	}
	if err := validateWatchdogEnv(dep.EnvVars); err != nil {
		return scheduler.Function{}, err
	}
	for _, s := range dep.Secrets {
		if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
			return scheduler.Function{}, badRequest("secrets", "%q is not a valid secret name: %s", s, strings.Join(errs, "; "))
		}
	}
	var nvidia string
	for field, res := range map[string]*types.FunctionResources{"limits": dep.Limits, "requests": dep.Requests} {
		if res == nil {
			continue
		}
		for key, v := range map[string]string{"memory": res.Memory, "cpu": res.CPU} {
			if v == "" {
				continue
			}
			q, err := resource.ParseQuantity(v)
			if err != nil || q.Sign() < 0 {
				return scheduler.Function{}, badRequest(field+"."+key, "%q is not a quantity such as 128Mi or 500m", v)
			}
		}
		if field == "requests" && res.NvidiaGPU != "" && dep.Limits == nil {
			nvidia = res.NvidiaGPU
		}
	}
	if dep.Limits != nil && dep.Limits.NvidiaGPU != "" {
		nvidia = dep.Limits.NvidiaGPU
	}
	req, err := gpu.ParseRequest(dep.Service, annotations, nvidia)
	if err != nil {
		return scheduler.Function{}, err
	}
	scale, err := scheduler.ParseScalePolicy(labels, annotations)
	if err != nil {
		return scheduler.Function{}, err
	}
	return scheduler.Function{Deployment: dep, GPU: req, Scale: scale}, nil
}

// validateWatchdogEnv checks the watchdog settings that must be numbers,
// as of-watchdog would refuse them at start: exec_timeout is whole
// seconds or a Go duration, max_inflight a whole number.
func validateWatchdogEnv(env map[string]string) error {
	if v, ok := env["exec_timeout"]; ok && v != "" {
		if n, err := strconv.Atoi(v); err != nil {
			if d, err := time.ParseDuration(v); err != nil || d < 0 {
				return badRequest("envVars.exec_timeout", "%q is not seconds or a duration such as 30s", v)
			}
		} else if n < 0 {
			return badRequest("envVars.exec_timeout", "%q is negative", v)
		}
	}
	if v, ok := env["max_inflight"]; ok && v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 0 {
			return badRequest("envVars.max_inflight", "%q is not a whole number of requests", v)
		}
	}
	return nil
}

func mapOf(m *map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	return *m
}
