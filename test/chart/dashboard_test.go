package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/prometheus/client_golang/prometheus"
)

// The metrics the dashboard is built on (handlers/metrics.go). The test
// reads their names and labels from handlers' own metric descriptions, so
// a renamed metric or label fails here; this list only says which of them
// the dashboard must show.
var dashboardMustUse = []string{
	"faas_gpu_gpu_sm_allocated_percent",
	"faas_gpu_gpu_memory_allocated_bytes",
	"faas_gpu_gpu_memory_capacity_bytes",
	"faas_gpu_gpu_replicas",
	"faas_gpu_function_replicas",
	"faas_gpu_function_request_rate",
	"faas_gpu_pending_replicas",
	"faas_gpu_cache_hits_total",
	"faas_gpu_cache_misses_total",
	"faas_gpu_invocations_total",
	"faas_gpu_invocation_duration_seconds_bucket",
	"faas_gpu_function_slo_violations_total",
	"faas_gpu_function_slo_seconds",
	"faas_gpu_autoscaler_actions_total",
	"faas_gpu_replica_startup_seconds_bucket",
	"faas_gpu_scheduler_decisions_total",
	"faas_gpu_scheduler_decision_duration_seconds_bucket",
}

// captureRegisterer records what NewProxyMetrics registers.
type captureRegisterer struct{ collectors []prometheus.Collector }

func (c *captureRegisterer) Register(col prometheus.Collector) error {
	c.collectors = append(c.collectors, col)
	return nil
}
func (c *captureRegisterer) MustRegister(cols ...prometheus.Collector) {
	c.collectors = append(c.collectors, cols...)
}
func (c *captureRegisterer) Unregister(prometheus.Collector) bool { return false }

var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// sampleReporter is a provider with one of everything the collector
// exports only when there is one: a GPU with a replica, a function with an
// SLO, a pending replica, a model load, autoscaler actions and a
// quarantined state record.
type sampleReporter struct{}

func (sampleReporter) GPUReport(context.Context) (scheduler.ClusterReport, error) {
	return scheduler.ClusterReport{
		Nodes: []scheduler.NodeReport{{Name: "node-a", GPUs: []scheduler.GPUReport{{UUID: "GPU-0", MemoryBytes: 16 << 30,
			Replicas: []scheduler.ReplicaReport{{ID: "fn-1", Function: "fn", Namespace: "openfaas-fn", SMPercent: 50}}}}}},
		Pending:   []scheduler.PendingEntry{{ID: "fn-2", Function: "fn", Namespace: "openfaas-fn"}},
		Functions: []scheduler.FunctionReport{{Name: "fn", Namespace: "openfaas-fn", SLO: "100ms", Replicas: 2, Ready: 1, Pending: 1}},
		Stats: scheduler.Stats{
			ModelLoadSeconds: map[string]scheduler.Histogram{scheduler.ModelLoadCold: {}},
			IdleLoads:        map[string]uint64{scheduler.IdleLoadDone: 1},
			Autoscaler:       []scheduler.ScaleActions{{Function: "fn", Namespace: "openfaas-fn", Up: 1}},
		},
	}, nil
}

// QuarantinedRecords makes the collector export the count of unreadable
// state records, as the local backend does.
func (sampleReporter) QuarantinedRecords() uint64 { return 1 }

// The vectors NewProxyMetrics registers, by what their children are, so
// that the test can make each export a series.
type (
	counterVec interface {
		GetMetricWithLabelValues(...string) (prometheus.Counter, error)
	}
	gaugeVec interface {
		GetMetricWithLabelValues(...string) (prometheus.Gauge, error)
	}
	observerVec interface {
		GetMetricWithLabelValues(...string) (prometheus.Observer, error)
	}
)

// codeMetrics maps each faas_gpu_ series name the provider can export to
// its labels. Names and labels come from the collector's and the proxy's
// metric descriptions; the kind of each metric from what a registry
// gathers of it (the collector over a sample report, the proxy's vectors
// with one series each): a histogram, whatever its name, is queried
// through its _bucket (with le), _sum and _count series, a summary through
// its quantiles, _sum and _count, and neither by its bare name.
func codeMetrics(t *testing.T) map[string][]string {
	t.Helper()
	proxy := &captureRegisterer{}
	handlers.NewProxyMetrics(proxy)
	cols := append([]prometheus.Collector{handlers.NewCollector(sampleReporter{})}, proxy.collectors...)
	metrics := map[string][]string{}
	reg := prometheus.NewPedanticRegistry()
	for _, col := range cols {
		ch := make(chan *prometheus.Desc)
		go func() {
			col.Describe(ch)
			close(ch)
		}()
		var described []string
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the name and labels of %s", d)
			}
			var labels []string
			if m[2] != "" {
				for _, l := range strings.Split(m[2], ",") {
					labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
				}
			}
			metrics[m[1]] = labels
			described = append(described, m[1])
		}
		// A vector (one description) exports nothing until it has a
		// child: give it one.
		child := func() []string {
			if len(described) != 1 {
				t.Fatalf("%T describes %v: a vector describes one metric", col, described)
			}
			values := make([]string, len(metrics[described[0]]))
			for i := range values {
				values[i] = "x"
			}
			return values
		}
		var err error
		switch v := col.(type) {
		case counterVec:
			_, err = v.GetMetricWithLabelValues(child()...)
		case gaugeVec:
			_, err = v.GetMetricWithLabelValues(child()...)
		case observerVec:
			_, err = v.GetMetricWithLabelValues(child()...)
		}
		if err != nil {
			t.Fatalf("%s: %v", described[0], err)
		}
		if err := reg.Register(col); err != nil {
			t.Fatalf("register %s: %v", strings.Join(described, ", "), err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather the provider's metrics: %v", err)
	}
	kind := map[string]string{}
	for _, mf := range families {
		kind[mf.GetName()] = mf.GetType().String()
	}
	for _, name := range slices.Sorted(maps.Keys(metrics)) {
		labels := metrics[name]
		switch kind[name] {
		case "":
			t.Fatalf("%s is described but was not gathered: make sampleReporter's report export it, so the test knows its kind", name)
		case "HISTOGRAM", "GAUGE_HISTOGRAM":
			delete(metrics, name)
			metrics[name+"_bucket"] = append(slices.Clone(labels), "le")
			metrics[name+"_sum"] = labels
			metrics[name+"_count"] = labels
		case "SUMMARY":
			metrics[name] = append(slices.Clone(labels), "quantile")
			metrics[name+"_sum"] = labels
			metrics[name+"_count"] = labels
		}
	}
	if len(metrics) < 10 {
		t.Fatalf("read only %d metrics from handlers: %v", len(metrics), metrics)
	}
	return metrics
}

var (
	metricRE   = regexp.MustCompile(`\bfaas_gpu_[a-zA-Z0-9_]+`)
	selectorRE = regexp.MustCompile(`\b(faas_gpu_[a-zA-Z0-9_]+)\s*\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"`)
	groupingRE = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	labelValRE = regexp.MustCompile(`label_values\(\s*(faas_gpu_[a-zA-Z0-9_]+)\s*(?:\{[^}]*\})?\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
)

// queries returns every PromQL string in the dashboard: panel targets and
// template variables, with where each is.
func queries(v any, path string, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			p := path + "." + k
			if s, ok := c.(string); ok && (k == "expr" || k == "query" || k == "definition") {
				if strings.Contains(s, "faas_gpu_") || k == "expr" {
					out[p] = s
				}
				continue
			}
			queries(c, p, out)
		}
	case []any:
		for i, c := range x {
			queries(c, fmt.Sprintf("%s[%d]", path, i), out)
		}
	}
}

func TestGrafanaDashboard(t *testing.T) {
	r := render(t, "--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.namespace=monitoring",
		"--set", "grafanaDashboard.annotations.grafana_folder=GPU")
	cm := r.one(t, "ConfigMap", "faas-gpu-grafana-dashboard")
	if cm.Metadata.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v: want grafana_dashboard: \"1\" for Grafana's sidecar", cm.Metadata.Labels)
	}
	if cm.Metadata.Namespace != "monitoring" || cm.Metadata.Annotations["grafana_folder"] != "GPU" {
		t.Errorf("dashboard ConfigMap in %q with annotations %v: want grafanaDashboard.namespace and .annotations", cm.Metadata.Namespace, cm.Metadata.Annotations)
	}
	if len(cm.Data) != 1 {
		t.Fatalf("dashboard ConfigMap holds %d files, want one JSON", len(cm.Data))
	}
	var dash map[string]any
	for file, content := range cm.Data {
		if !strings.HasSuffix(file, ".json") {
			t.Errorf("dashboard file %q: the sidecar loads *.json", file)
		}
		if err := json.Unmarshal([]byte(content), &dash); err != nil {
			t.Fatalf("dashboard %s is not JSON: %v", file, err)
		}
	}
	if dash["uid"] == "" || dash["title"] == "" {
		t.Errorf("dashboard has no uid or title")
	}

	known := codeMetrics(t)
	qs := map[string]string{}
	queries(dash, "", qs)
	if len(qs) < 10 {
		t.Fatalf("dashboard has %d queries", len(qs))
	}
	used := map[string]bool{}
	for where, q := range qs {
		if strings.Count(q, "(") != strings.Count(q, ")") || strings.Count(q, "{") != strings.Count(q, "}") {
			t.Errorf("%s: unbalanced brackets in %q", where, q)
		}
		names := metricRE.FindAllString(q, -1)
		if len(names) == 0 && !strings.HasPrefix(where, ".templating") {
			t.Errorf("%s: %q uses no faas_gpu_ metric", where, q)
		}
		// Labels any metric of this query carries, for by/without.
		exprLabels := map[string]bool{}
		for _, n := range names {
			labels, ok := known[n]
			if !ok {
				t.Errorf("%s: %s is not a metric faas-gpu exports (handlers/metrics.go)", where, n)
				continue
			}
			used[n] = true
			for _, l := range labels {
				exprLabels[l] = true
			}
		}
		for _, m := range selectorRE.FindAllStringSubmatch(q, -1) {
			for _, mm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
				if labels, ok := known[m[1]]; ok && !slices.Contains(labels, mm[1]) {
					t.Errorf("%s: %s has no label %q (it has %v)", where, m[1], mm[1], labels)
				}
			}
		}
		for _, m := range groupingRE.FindAllStringSubmatch(q, -1) {
			for _, l := range strings.Split(m[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !exprLabels[l] {
					t.Errorf("%s: groups by %q, which none of its metrics carries", where, l)
				}
			}
		}
		for _, m := range labelValRE.FindAllStringSubmatch(q, -1) {
			if labels, ok := known[m[1]]; ok && !slices.Contains(labels, m[2]) {
				t.Errorf("%s: label_values of %s.%s, a label it does not have", where, m[1], m[2])
			}
		}
	}
	for _, m := range dashboardMustUse {
		if _, ok := known[m]; !ok {
			t.Errorf("handlers no longer exports %s, which the dashboard is built on", m)
		}
		if !used[m] {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
	all := strings.Join(slices.Collect(maps.Values(qs)), "\n")
	for _, want := range []string{"histogram_quantile(0.50,", "histogram_quantile(0.95,", "histogram_quantile(0.99,", "faas_gpu_cache_hits_total"} {
		if !strings.Contains(all, want) {
			t.Errorf("the dashboard has no query with %q", want)
		}
	}

	// Panels: unique ids, on the 24-column grid, every one querying the
	// dashboard's data source variable.
	ids := map[float64]bool{}
	var titles []string
	panels, _ := dash["panels"].([]any)
	for i, p := range panels {
		pm, _ := p.(map[string]any)
		id, _ := pm["id"].(float64)
		if ids[id] {
			t.Errorf("panel %d: id %v is used twice", i, id)
		}
		ids[id] = true
		g, _ := pm["gridPos"].(map[string]any)
		if x, w := g["x"].(float64), g["w"].(float64); w <= 0 || x+w > 24 {
			t.Errorf("panel %q: gridPos %v is off the 24-column grid", pm["title"], g)
		}
		if pm["type"] == "row" {
			continue
		}
		titles = append(titles, fmt.Sprint(pm["title"]))
		targets, _ := pm["targets"].([]any)
		if len(targets) == 0 {
			t.Errorf("panel %q has no query", pm["title"])
		}
		ds, _ := pm["datasource"].(map[string]any)
		if ds["uid"] != "${datasource}" {
			t.Errorf("panel %q: datasource %v, want the ${datasource} variable", pm["title"], pm["datasource"])
		}
	}
	sort.Strings(titles)
	t.Logf("%d panels: %s", len(titles), strings.Join(titles, ", "))
}

func TestGrafanaDashboardOffByDefault(t *testing.T) {
	if got := render(t).find("ConfigMap", "faas-gpu-grafana-dashboard"); len(got) != 0 {
		t.Errorf("the dashboard ConfigMap is rendered by default")
	}
}
