package handlers

import (
	"errors"
	"testing"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/openfaas/faas-provider/types"
)

// The watchdog settings that must be numbers are refused at deploy with
// the field named, as of-watchdog would refuse to start with them.
func TestValidateWatchdogEnv(t *testing.T) {
	cases := []struct {
		name  string
		env   map[string]string
		field string // "" accepted
	}{
		{"none", nil, ""},
		{"seconds", map[string]string{"exec_timeout": "30", "max_inflight": "4"}, ""},
		{"duration", map[string]string{"exec_timeout": "1m30s"}, ""},
		{"sub-second", map[string]string{"exec_timeout": "500ms"}, ""},
		{"zero inflight is no limit", map[string]string{"max_inflight": "0"}, ""},
		{"timeout words", map[string]string{"exec_timeout": "soon"}, "envVars.exec_timeout"},
		{"timeout negative", map[string]string{"exec_timeout": "-5"}, "envVars.exec_timeout"},
		{"timeout negative duration", map[string]string{"exec_timeout": "-5s"}, "envVars.exec_timeout"},
		{"inflight words", map[string]string{"max_inflight": "many"}, "envVars.max_inflight"},
		{"inflight fraction", map[string]string{"max_inflight": "1.5"}, "envVars.max_inflight"},
		{"inflight negative", map[string]string{"max_inflight": "-1"}, "envVars.max_inflight"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := validateDeployment(types.FunctionDeployment{Service: "fn", Image: "img", EnvVars: c.env})
			var fe *gpu.FieldError
			switch {
			case c.field == "" && err != nil:
				t.Fatalf("want accepted, got %v", err)
			case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
				t.Fatalf("want a FieldError naming %s, got %v", c.field, err)
			}
		})
	}
}
