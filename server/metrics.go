package server

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec
	tokensIn    *prometheus.CounterVec
	tokensOut   *prometheus.CounterVec
	ttft        *prometheus.HistogramVec
	itl         *prometheus.HistogramVec
	queue       *prometheus.GaugeVec
	inUse       *prometheus.GaugeVec
	sessionsMax *prometheus.GaugeVec

	prefixReused *prometheus.CounterVec
	drafted      *prometheus.CounterVec
	kvCapacity   *prometheus.GaugeVec
	kvReserved   *prometheus.GaugeVec
	kvCached     *prometheus.GaugeVec
	kvHot        *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jitllm_requests_total", Help: "HTTP requests by endpoint and status code.",
		}, []string{"endpoint", "status"}),
		tokensIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jitllm_prompt_tokens_total", Help: "Prompt tokens processed.",
		}, []string{"model"}),
		tokensOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jitllm_completion_tokens_total", Help: "Tokens generated.",
		}, []string{"model"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jitllm_time_to_first_token_seconds", Help: "From the request's arrival to its first generated token (queueing and prefill included).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"model"}),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jitllm_inter_token_latency_seconds", Help: "Between consecutive generated tokens of one sequence.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"model"}),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jitllm_queue_depth", Help: "Requests waiting for a session.",
		}, []string{"model"}),
		inUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jitllm_sessions_in_use", Help: "Sessions running a request.",
		}, []string{"model"}),
		sessionsMax: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jitllm_sessions_max", Help: "Most sessions a model may have (-max-sessions).",
		}, []string{"model"}),
		prefixReused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jitllm_prefix_tokens_reused_total", Help: "Prompt tokens whose KV was already cached (prefix reuse) instead of computed.",
		}, []string{"model"}),
		drafted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jitllm_draft_tokens_total", Help: "Tokens guessed by speculative decoding (-lookup), by whether the model kept them.",
		}, []string{"model", "kept"}),
		kvCapacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jitllm_kv_capacity_bytes", Help: "KV cache memory of the model's engine (every slot's context).",
		}, []string{"model"}),
		kvReserved: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jitllm_kv_reserved_bytes", Help: "KV memory reserved by requests in flight (prompt plus max_tokens each).",
		}, []string{"model"}),
		kvCached: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jitllm_kv_cached_bytes", Help: "KV memory held by idle slots' retained prompts (the prefix cache).",
		}, []string{"model"}),
		kvHot: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jitllm_kv_prefix_snapshot_bytes", Help: "Host memory of the hot-prefix snapshots (shared prompt prefixes kept beyond their slots).",
		}, []string{"model"}),
	}
	m.reg.MustRegister(m.prefixReused, m.drafted, m.kvCapacity, m.kvReserved, m.kvCached, m.kvHot)
	m.reg.MustRegister(m.requests, m.tokensIn, m.tokensOut, m.ttft, m.itl, m.queue, m.inUse, m.sessionsMax,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}
