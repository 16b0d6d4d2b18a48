//! The two text formats a scrape may ask for.
//!
//! `prometheus-client` writes OpenMetrics 1.0 text, which Prometheus asks
//! for in its `Accept` header. Everything else that reads `/metrics`
//! (curl, `promtool check metrics` in the versions Debian ships, older
//! scrapers) parses the classic Prometheus text format 0.0.4, where a
//! counter's family is named with its `_total` suffix, and there is no
//! `# UNIT` or `# EOF`. [`to_prometheus_text`] converts one to the other;
//! samples are written the same way in both.

/// Content type of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the classic Prometheus text format.
pub const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Which format a scraper asked for, from its `Accept` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Prometheus,
}

impl Format {
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS,
            Format::Prometheus => PROMETHEUS,
        }
    }
}

/// OpenMetrics text (as `prometheus-client` writes it) to Prometheus text
/// format 0.0.4: counter families take their samples' `_total` name, `info`
/// families become gauges named `_info`, `# UNIT` and `# EOF` go.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // HELP comes before TYPE; hold it until the type says how to name it.
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some((name, text)) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gaugehistogram" => (name.to_string(), "histogram"),
                "stateset" | "unknown" => (name.to_string(), "untyped"),
                k => (name.to_string(), k),
            };
            if let Some((_, text)) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        if let Some((name, text)) = help.take() {
            out.push_str(&format!("# HELP {name} {text}\n"));
        }
        out.push_str(line);
        out.push('\n');
    }
    if let Some((name, text)) = help {
        out.push_str(&format!("# HELP {name} {text}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_take_their_total_name_and_eof_goes() {
        let om = "# HELP edgemu_x Things.\n# TYPE edgemu_x counter\nedgemu_x_total{host=\"a\"} 3\n# HELP edgemu_g Now.\n# TYPE edgemu_g gauge\n# UNIT edgemu_g bytes\nedgemu_g 1\n# EOF\n";
        let text = to_prometheus_text(om);
        assert_eq!(
            text,
            "# HELP edgemu_x_total Things.\n# TYPE edgemu_x_total counter\nedgemu_x_total{host=\"a\"} 3\n# HELP edgemu_g Now.\n# TYPE edgemu_g gauge\nedgemu_g 1\n"
        );
    }

    #[test]
    fn accept_headers_choose_the_format() {
        let prom = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
        assert_eq!(Format::from_accept(Some(prom)), Format::OpenMetrics);
        assert_eq!(Format::from_accept(Some("*/*")), Format::Prometheus);
        assert_eq!(Format::from_accept(None), Format::Prometheus);
    }
}
