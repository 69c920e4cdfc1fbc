// Package promexport serves the server's state as Prometheus metrics.
package promexport

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

var statuses = []string{"starting", "ready", "busy", "stale", "disconnected"}

// agentCollector reads the registry at scrape time, so the numbers are never stale.
type agentCollector struct {
	dir     ports.AgentDirectory
	agents  *prometheus.Desc
	running *prometheus.Desc
}

func (c *agentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.agents
	ch <- c.running
}

func (c *agentCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{}
	for _, a := range c.dir.Agents() {
		counts[a.Status]++
		ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(a.RunningCommands), a.ID)
	}
	for _, s := range statuses {
		ch <- prometheus.MustNewConstMetric(c.agents, prometheus.GaugeValue, float64(counts[s]), s)
	}
}

// Handler returns the /metrics handler with process, Go and agent metrics.
func Handler(dir ports.AgentDirectory) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&agentCollector{
			dir:     dir,
			agents:  prometheus.NewDesc("agentic_agents", "Agents in the registry by status.", []string{"status"}, nil),
			running: prometheus.NewDesc("agentic_agent_running_commands", "Commands running on each agent.", []string{"agent_id"}, nil),
		},
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
