// Package promexport serves the server's state as Prometheus metrics.
package promexport

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

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
	counts := map[ports.AgentStatus]int{}
	for _, a := range c.dir.Agents() {
		counts[a.Status]++
		ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(a.RunningCommands), a.ID)
	}
	for _, s := range ports.AgentStatuses {
		ch <- prometheus.MustNewConstMetric(c.agents, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}

// ProvisionTimes is the histogram of environment provision times (request
// to agent ready) per runtime.
type ProvisionTimes struct{ h *prometheus.HistogramVec }

// NewProvisionTimes returns the histogram; buckets span containers (0.1 s)
// to VMs under software emulation (minutes).
func NewProvisionTimes() *ProvisionTimes {
	return &ProvisionTimes{h: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agentic_environment_provision_seconds",
		Help:    "Time from an environment's provision request to its agent being ready, by runtime.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160},
	}, []string{"runtime"})}
}

// Observe records one provision time.
func (p *ProvisionTimes) Observe(runtime string, d time.Duration) {
	p.h.WithLabelValues(runtime).Observe(d.Seconds())
}

// Handler returns the /metrics handler with process, Go and agent metrics,
// and the provision times when given.
func Handler(dir ports.AgentDirectory, provision *ProvisionTimes) http.Handler {
	reg := prometheus.NewRegistry()
	if provision != nil {
		reg.MustRegister(provision.h)
	}
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
