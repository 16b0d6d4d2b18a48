//! The gateways' families under vLLM's names, so dashboards and benchmark
//! tools built for vLLM's `/metrics` read an edgemu gateway unchanged:
//! `vllm:time_to_first_token_seconds`, `vllm:time_per_output_token_seconds`,
//! `vllm:e2e_request_latency_seconds`, `vllm:request_queue_time_seconds`
//! (histograms with vLLM's buckets), `vllm:request_success_total` (by
//! `finished_reason`), `vllm:num_requests_running`,
//! `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`, all labelled
//! `model_name`, `edgemu_gateway_request_errors_total` (by `reason`:
//! what failed inside the emulator) and the histogram
//! `edgemu_gateway_overhead_seconds` (what the HTTP side adds to a request). Times are measured on the run clock
//! from a request's arrival at the gateway, so they include the emulated
//! radio, links, scheduling and queueing.
//!
//! They are on the host's `/metrics` (control address) and on each
//! gateway's own `/metrics`.

use edgemu_actors::lyreo::live::{GatewayLive, Histogram, LiveState};
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model_name: String,
    gateway: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FinishLabels {
    model_name: String,
    gateway: String,
    finished_reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    model_name: String,
    gateway: String,
    reason: String,
}

#[derive(Debug)]
struct HistFamily(Vec<(ModelLabels, Histogram)>);

impl EncodeMetric for HistFamily {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, h) in &self.0 {
            let mut buckets: Vec<(f64, u64)> = h
                .bounds_s
                .iter()
                .copied()
                .zip(h.counts.iter().copied())
                .collect();
            buckets.push((f64::MAX, h.counts.last().copied().unwrap_or(0)));
            encoder
                .encode_family(labels)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    h.sum_s, h.count, &buckets, None,
                )?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

fn model(name: &str, g: &GatewayLive) -> ModelLabels {
    ModelLabels {
        model_name: g.model.clone(),
        gateway: name.to_string(),
    }
}

/// The gateways' families, or `None` when the host runs none.
pub fn registry(l: &LiveState) -> Option<Registry> {
    if l.gateways.is_empty() {
        return None;
    }
    let mut reg = Registry::default();
    type Field = fn(&GatewayLive) -> &Histogram;
    let hists: [(&str, &str, Field); 5] = [
        (
            "vllm:time_to_first_token_seconds",
            "Arrival at the gateway to the first token delivered to it",
            |g| &g.ttft,
        ),
        (
            "vllm:time_per_output_token_seconds",
            "Mean time between a request's delivered tokens",
            |g| &g.tpot,
        ),
        (
            "vllm:e2e_request_latency_seconds",
            "Arrival at the gateway to the last token delivered to it",
            |g| &g.e2e,
        ),
        (
            "vllm:request_queue_time_seconds",
            "Arrival at the gateway to the start of the prefill (scheduling, upload, wait)",
            |g| &g.queue,
        ),
        (
            "edgemu_gateway_overhead_seconds",
            "What the gateway's HTTP side adds to a finished request: request read to last byte written, less its time in the emulator",
            |g| &g.overhead,
        ),
    ];
    for (name, help, field) in hists {
        let fam = HistFamily(
            l.gateways
                .iter()
                .map(|(n, g)| (model(n, g), field(g).clone()))
                .collect(),
        );
        reg.register(name, help, fam);
    }
    let success = Family::<FinishLabels, Counter>::default();
    let errors = Family::<ErrorLabels, Counter>::default();
    let running = Family::<ModelLabels, Gauge>::default();
    let prompt = Family::<ModelLabels, Counter>::default();
    let generation = Family::<ModelLabels, Counter>::default();
    for (n, g) in &l.gateways {
        let m = model(n, g);
        for (reason, count) in &g.success {
            success
                .get_or_create(&FinishLabels {
                    model_name: m.model_name.clone(),
                    gateway: m.gateway.clone(),
                    finished_reason: reason.clone(),
                })
                .inc_by(*count);
        }
        for (reason, count) in &g.errors {
            errors
                .get_or_create(&ErrorLabels {
                    model_name: m.model_name.clone(),
                    gateway: m.gateway.clone(),
                    reason: reason.clone(),
                })
                .inc_by(*count);
        }
        running
            .get_or_create(&m)
            .set(i64::try_from(g.running).unwrap_or(i64::MAX));
        prompt.get_or_create(&m).inc_by(g.prompt_tokens);
        generation.get_or_create(&m).inc_by(g.generation_tokens);
    }
    reg.register(
        "vllm:request_success",
        "Requests finished, by finish reason",
        success,
    );
    reg.register(
        "edgemu_gateway_request_errors",
        "Requests that failed inside the emulator, by reason",
        errors,
    );
    reg.register(
        "vllm:num_requests_running",
        "Requests open at the gateway",
        running,
    );
    reg.register(
        "vllm:prompt_tokens",
        "Prompt tokens of the requests taken",
        prompt,
    );
    reg.register(
        "vllm:generation_tokens",
        "Output tokens delivered by finished requests",
        generation,
    );
    Some(reg)
}

/// The gateways' families as Prometheus text (a gateway's own `/metrics`).
pub fn text(l: &LiveState) -> String {
    let mut out = String::new();
    if let Some(reg) = registry(l) {
        let _ = prometheus_client::encoding::text::encode_registry(&mut out, &reg);
    }
    let _ = prometheus_client::encoding::text::encode_eof(&mut out);
    super::text_format::to_prometheus_text(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_actors::lyreo::live::LyreoLive;

    #[test]
    fn gateway_counters_and_histograms_carry_vllms_names() {
        let live = LyreoLive::default();
        live.gateway("gw", "m", |g| {
            g.running = 2;
            g.prompt_tokens = 30;
            g.generation_tokens = 7;
            *g.success.entry("length".into()).or_default() += 1;
            *g.errors.entry("server killed".into()).or_default() += 3;
            g.ttft.observe(0.03);
            g.e2e.observe(1.2);
        });
        let t = text(&live.snapshot());
        for want in [
            "# TYPE vllm:time_to_first_token_seconds histogram",
            r#"vllm:time_to_first_token_seconds_bucket{le="0.04",model_name="m",gateway="gw"} 1"#,
            r#"vllm:time_to_first_token_seconds_bucket{le="0.02",model_name="m",gateway="gw"} 0"#,
            r#"vllm:time_to_first_token_seconds_count{model_name="m",gateway="gw"} 1"#,
            r#"vllm:e2e_request_latency_seconds_bucket{le="1.5",model_name="m",gateway="gw"} 1"#,
            r#"vllm:request_success_total{model_name="m",gateway="gw",finished_reason="length"} 1"#,
            r#"edgemu_gateway_request_errors_total{model_name="m",gateway="gw",reason="server killed"} 3"#,
            r#"vllm:num_requests_running{model_name="m",gateway="gw"} 2"#,
            r#"vllm:prompt_tokens_total{model_name="m",gateway="gw"} 30"#,
            r#"vllm:generation_tokens_total{model_name="m",gateway="gw"} 7"#,
        ] {
            assert!(t.contains(want), "missing {want}:\n{t}");
        }
        assert!(registry(&LiveState::default()).is_none());
    }
}
