package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/agent"
	"github.com/faas-gpu/faas-gpu/gpu"
)

// Real: this machine has no NVIDIA driver (and a library path that does
// not exist makes it so on any machine), so NVML's dlopen fails and the
// agent must say why and exit non-zero, before needing any cluster.
func TestAgentWithoutNVML(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"once", []string{"-once", "-nvml-library", "/nonexistent/libnvidia-ml.so.1"}},
		{"daemon", []string{"-node-name", "gpu-node-1", "-nvml-library", "/nonexistent/libnvidia-ml.so.1"}},
		{"verb", []string{"agent", "-once", "-nvml-library", "/nonexistent/libnvidia-ml.so.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			var err error
			if tt.args[0] == "agent" {
				err = run(tt.args, &out, &out)
			} else {
				err = agentCmd(tt.args, &out, &out)
			}
			if err == nil || !strings.Contains(err.Error(), agent.MsgNoNVML) || !errors.Is(err, gpu.ErrNoDiscovery) {
				t.Fatalf("err = %v; want %q", err, agent.MsgNoNVML)
			}
			if out.Len() != 0 {
				t.Fatalf("printed %q with no GPUs discovered", out.String())
			}
		})
	}
}

// The default library path, as a DaemonSet runs it: on a machine without
// a driver the same message; on a GPU machine -once prints the annotation.
func TestAgentOnceDefaultLibrary(t *testing.T) {
	var out bytes.Buffer
	err := agentCmd([]string{"-once"}, &out, io.Discard)
	if err != nil {
		if !strings.Contains(err.Error(), agent.MsgNoNVML) {
			t.Fatalf("err = %v; want %q", err, agent.MsgNoNVML)
		}
		return
	}
	var n gpu.NodeGPUs
	if err := json.Unmarshal(out.Bytes(), &n); err != nil || n.Version != gpu.NodeGPUsVersion {
		t.Fatalf("-once printed %q: %v", out.String(), err)
	}
}

func TestAgentBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  string // NODE_NAME
		want string
	}{
		{"no node name", nil, "", "-node-name"},
		{"zero interval", []string{"-interval", "0s"}, "n", "-interval"},
		{"bad port", []string{"-metrics-port", "70000"}, "n", "-metrics-port"},
		{"stray argument", []string{"extra"}, "n", "unexpected argument"},
		{"unknown flag", []string{"-nope"}, "n", "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", tt.env)
			var out bytes.Buffer
			err := agentCmd(tt.args, &out, &out)
			if err == nil || !strings.Contains(err.Error()+out.String(), tt.want) {
				t.Fatalf("err = %v, output %q; want %q", err, out.String(), tt.want)
			}
		})
	}
}

func TestAgentHelpDocumentsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if err := agentCmd([]string{"-h"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"-node-name", "-kubeconfig", "-interval", "-once", "-metrics-port", "-nvml-library", "NODE_NAME", gpu.AnnotationNodeGPUs} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("agent -h does not mention %s", f)
		}
	}
}
