// Package promexport serves the server's state as Prometheus metrics.
package promexport

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// agentCollector reads the registry at scrape time, so the numbers are never stale.
type agentCollector struct {
	dir        ports.AgentDirectory
	agents     *prometheus.Desc
	running    *prometheus.Desc
	runningAll *prometheus.Desc
}

func (c *agentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.agents
	ch <- c.running
	ch <- c.runningAll
}

func (c *agentCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[ports.AgentStatus]int{}
	total := 0
	for _, a := range c.dir.Agents() {
		counts[a.Status]++
		total += a.RunningCommands
		// A series per busy agent only: ten thousand idle agents would be
		// ten thousand series of zeros in every scrape.
		if a.RunningCommands > 0 {
			ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(a.RunningCommands), a.ID)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.runningAll, prometheus.GaugeValue, float64(total))
	for _, s := range ports.AgentStatuses {
		ch <- prometheus.MustNewConstMetric(c.agents, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}

// ProvisionTimes is the histogram of environment provision times (request
// to agent ready) per runtime.
type ProvisionTimes struct{ h *prometheus.HistogramVec }

// provisionBuckets span containers (0.1 s) to VMs under software emulation
// (minutes): environments' and pool members' provision times.
var provisionBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160}

// secondsBy is a histogram of durations in seconds, by one label.
func secondsBy(name, help, label string, buckets []float64) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, []string{label})
}

// NewProvisionTimes returns the histogram.
func NewProvisionTimes() *ProvisionTimes {
	return &ProvisionTimes{h: secondsBy("agentic_environment_provision_seconds",
		"Time from an environment's provision request to its agent being ready, by runtime.",
		"runtime", provisionBuckets)}
}

// Observe records one provision time.
func (p *ProvisionTimes) Observe(runtime string, d time.Duration) {
	p.h.WithLabelValues(runtime).Observe(d.Seconds())
}

// TaskMetrics are the tasks' metrics: how long each took to its end, by
// outcome, and (read at scrape time) how many are in each state.
type TaskMetrics struct {
	durations *prometheus.HistogramVec
	// Counts is read at each scrape; nil counts nothing.
	Counts func() map[string]int
}

// NewTaskMetrics returns the task metrics; buckets span a trivial command
// (0.1 s) to a long agent run (hours).
func NewTaskMetrics() *TaskMetrics {
	return &TaskMetrics{durations: secondsBy("agentic_task_duration_seconds",
		"Time from a task's submission to its end, by outcome (completed, failed, failed_preserved, cancelled).",
		"outcome", []float64{0.1, 0.5, 1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400})}
}

// ObserveEnd records a task's end.
func (m *TaskMetrics) ObserveEnd(outcome string, d time.Duration) {
	m.durations.WithLabelValues(outcome).Observe(d.Seconds())
}

type taskCollector struct {
	m     *TaskMetrics
	tasks *prometheus.Desc
}

func (c *taskCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.tasks }

func (c *taskCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.Counts == nil {
		return
	}
	for state, n := range c.m.Counts() {
		ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, float64(n), state)
	}
}

// Handler returns the /metrics handler with process, Go and agent metrics,
// and the provision times, task, egress, pool and sleep metrics when given.
func Handler(dir ports.AgentDirectory, provision *ProvisionTimes, tasks *TaskMetrics, egress *EgressMetrics, pools *PoolMetrics, sleep *SleepMetrics) http.Handler {
	reg := prometheus.NewRegistry()
	if sleep != nil {
		reg.MustRegister(sleep.hibernate, sleep.wake, &sleepCollector{m: sleep,
			count: prometheus.NewDesc("agentic_environments_hibernated", "Environments hibernated (or being saved).", nil, nil),
			bytes: prometheus.NewDesc("agentic_hibernated_saved_bytes",
				"Disk the saved states of hibernated environments take (bounded by AGENTIC_HIBERNATE_MAX_BYTES).", nil, nil),
		})
	}
	if pools != nil {
		reg.MustRegister(pools.refill, &poolCollector{m: pools,
			size:   prometheus.NewDesc("agentic_pool_size", "Members a warm pool keeps.", []string{"pool"}, nil),
			idle:   prometheus.NewDesc("agentic_pool_idle", "A warm pool's members ready to be taken.", []string{"pool"}, nil),
			hits:   prometheus.NewDesc("agentic_pool_hits_total", "Environment creates that took a pool's member.", []string{"pool"}, nil),
			misses: prometheus.NewDesc("agentic_pool_misses_total", "Environment creates that matched a pool with no idle member.", []string{"pool"}, nil),
		})
	}
	if egress != nil {
		reg.MustRegister(egress.tunnels, egress.bytes)
	}
	if provision != nil {
		reg.MustRegister(provision.h)
	}
	if tasks != nil {
		reg.MustRegister(tasks.durations, &taskCollector{m: tasks,
			tasks: prometheus.NewDesc("agentic_tasks", "Tasks by state.", []string{"state"}, nil)})
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&agentCollector{
			dir:        dir,
			agents:     prometheus.NewDesc("agentic_agents", "Agents in the registry by status.", []string{"status"}, nil),
			running:    prometheus.NewDesc("agentic_agent_running_commands", "Commands running on each agent that runs any.", []string{"agent_id"}, nil),
			runningAll: prometheus.NewDesc("agentic_running_commands", "Commands running on all agents.", nil, nil),
		},
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// SleepMetrics are the metrics of hibernation: how long each hibernation
// and each wake took, by runtime, and (read at scrape time) how many
// environments are hibernated and the disk their saved states take.
type SleepMetrics struct {
	hibernate, wake *prometheus.HistogramVec
	// Hibernated is read at each scrape; nil counts nothing.
	Hibernated func() (count int, bytes int64)
}

// NewSleepMetrics returns the sleep metrics; buckets span a container's
// checkpoint (50 ms) to a large VM's memory save (minutes).
func NewSleepMetrics() *SleepMetrics {
	return &SleepMetrics{
		hibernate: secondsBy("agentic_environment_hibernate_seconds",
			"Time an environment took to hibernate (its runtime's save), by runtime.", "runtime", provisionBuckets),
		wake: secondsBy("agentic_environment_wake_seconds",
			"Time a hibernated environment took to wake, until its agent was back, by runtime.", "runtime", provisionBuckets),
	}
}

// ObserveHibernate records one hibernation.
func (m *SleepMetrics) ObserveHibernate(runtime string, d time.Duration) {
	m.hibernate.WithLabelValues(runtime).Observe(d.Seconds())
}

// ObserveWake records one wake.
func (m *SleepMetrics) ObserveWake(runtime string, d time.Duration) {
	m.wake.WithLabelValues(runtime).Observe(d.Seconds())
}

type sleepCollector struct {
	m            *SleepMetrics
	count, bytes *prometheus.Desc
}

func (c *sleepCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.bytes
}

func (c *sleepCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.Hibernated == nil {
		return
	}
	n, b := c.m.Hibernated()
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(b))
}

// PoolMetrics are the warm pools' metrics: members' provision times, and
// (read at scrape time) each pool's size, idle members, hits and misses.
type PoolMetrics struct {
	refill *prometheus.HistogramVec
	// Stats is read at each scrape; nil counts nothing.
	Stats func() []PoolStats
}

// PoolStats is one pool at a scrape.
type PoolStats struct {
	Name         string
	Size, Idle   int
	Hits, Misses uint64
}

// NewPoolMetrics returns the pool metrics.
func NewPoolMetrics() *PoolMetrics {
	return &PoolMetrics{refill: secondsBy("agentic_pool_refill_seconds",
		"Time from a pool member's provision request to its agent being ready, by pool.",
		"pool", provisionBuckets)}
}

// ObserveRefill records one member's provision time.
func (m *PoolMetrics) ObserveRefill(pool string, d time.Duration) {
	m.refill.WithLabelValues(pool).Observe(d.Seconds())
}

type poolCollector struct {
	m                        *PoolMetrics
	size, idle, hits, misses *prometheus.Desc
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.size
	ch <- c.idle
	ch <- c.hits
	ch <- c.misses
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.Stats == nil {
		return
	}
	for _, p := range c.m.Stats() {
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(p.Size), p.Name)
		ch <- prometheus.MustNewConstMetric(c.idle, prometheus.GaugeValue, float64(p.Idle), p.Name)
		ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(p.Hits), p.Name)
		ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(p.Misses), p.Name)
	}
}

// EgressMetrics counts the tunnels of proxy environments.
type EgressMetrics struct {
	tunnels, bytes *prometheus.CounterVec
}

// NewEgressMetrics returns the egress counters.
func NewEgressMetrics() *EgressMetrics {
	return &EgressMetrics{
		tunnels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentic_egress_tunnels_total", Help: "Egress connections through agents, by whether they were allowed.",
		}, []string{"allowed"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentic_egress_bytes_total", Help: "Bytes through egress tunnels, by direction (up: to the destination).",
		}, []string{"direction"}),
	}
}

// Observe counts one tunnel.
func (m *EgressMetrics) Observe(allowed bool, up, down int64) {
	m.tunnels.WithLabelValues(strconv.FormatBool(allowed)).Inc()
	m.bytes.WithLabelValues("up").Add(float64(up))
	m.bytes.WithLabelValues("down").Add(float64(down))
}
