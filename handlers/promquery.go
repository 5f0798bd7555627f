package handlers

import (
	"net/http"
	"strconv"
	"time"
)

// MakePrometheusQueryHandler answers the one Prometheus query the gateway
// makes when it lists functions, sum(gateway_function_invocation_total)
// by (function_name), from the proxy's own counts. Pointing the gateway's
// faas_prometheus_host/port at the provider gives true invocation counts
// with no Prometheus, and keeps the gateway's list from failing when no
// Prometheus answers.
func MakePrometheusQueryHandler(inv *Invocations) http.HandlerFunc {
	type sample struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	type data struct {
		ResultType string   `json:"resultType"`
		Result     []sample `json:"result"`
	}
	type response struct {
		Status string `json:"status"`
		Data   data   `json:"data"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		now := float64(time.Now().UnixMilli()) / 1000
		res := response{Status: "success", Data: data{ResultType: "vector", Result: []sample{}}}
		inv.Range(func(ns, name string, count uint64) {
			res.Data.Result = append(res.Data.Result, sample{
				Metric: map[string]string{"function_name": name + "." + ns},
				Value:  [2]any{now, strconv.FormatUint(count, 10)},
			})
		})
		writeJSON(w, http.StatusOK, res)
	}
}
