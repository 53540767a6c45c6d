//! Spans exported over OTLP (HTTP, protobuf) when the environment names a
//! collector (`OTEL_EXPORTER_OTLP_ENDPOINT`, or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` for traces alone); otherwise nothing
//! is built and nothing is spawned.
//!
//! Finished spans go to the SDK's batch processor: a bounded queue (a span
//! that does not fit is dropped) emptied by a thread of its own, so a slow,
//! failing or absent collector never holds a request up. Its failures are
//! not logged (the SDK's own logs are left out), so neither the endpoint nor
//! its headers (`OTEL_EXPORTER_OTLP_HEADERS`, often a token) reach a log line.
//! The other `OTEL_*` variables (headers, timeout, sampler, resource
//! attributes, the batch processor's sizes) are read by the SDK as usual.

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{ExporterBuildError, Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The service name, unless `OTEL_SERVICE_NAME` gives one.
pub const SERVICE_NAME: &str = "webhookd";

/// The provider whose spans [`shutdown`] flushes.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Where `var` (the environment) asks for spans to go, if anywhere:
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else
/// `OTEL_EXPORTER_OTLP_ENDPOINT` and `/v1/traces` (an empty one is unset);
/// nowhere when `OTEL_SDK_DISABLED` is `true`.
fn endpoint(var: &impl Fn(&str) -> Option<String>) -> Option<String> {
    let set = |name| {
        var(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return None;
    }
    set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
        set("OTEL_EXPORTER_OTLP_ENDPOINT")
            .map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
    })
}

/// An `http://` or `https://` URL with a host. (The SDK would send spans
/// to its default, `localhost:4318`, in place of one it cannot parse.)
fn usable(endpoint: &str) -> bool {
    endpoint.parse::<http::Uri>().is_ok_and(|uri| {
        matches!(uri.scheme_str(), Some("http" | "https")) && uri.authority().is_some()
    })
}

fn service_name(var: &impl Fn(&str) -> Option<String>) -> String {
    var("OTEL_SERVICE_NAME")
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| SERVICE_NAME.to_owned())
}

/// The layer that exports this process's spans, when the environment asks
/// for it. An error says why it could not be built, without the endpoint.
pub fn layer<S>() -> Result<Option<impl Layer<S>>, String>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let var = |name: &str| std::env::var(name).ok();
    let Some(endpoint) = endpoint(&var) else {
        return Ok(None);
    };
    if !usable(&endpoint) {
        return Err("the endpoint is not an http:// or https:// URL".to_owned());
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .build()
        .map_err(|error| match error {
            // Its text quotes the endpoint, which may carry credentials.
            ExporterBuildError::InvalidUri(..) => "the endpoint is not a valid URI".to_owned(),
            other => other.to_string(),
        })?;
    let resource = Resource::builder()
        .with_service_name(service_name(&var))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer(SERVICE_NAME);
    // A second initialisation (tests) keeps the first provider; this one
    // shuts down when its layer is dropped.
    let _ = PROVIDER.set(provider);
    Ok(Some(tracing_opentelemetry::layer().with_tracer(tracer)))
}

/// Exports the spans still queued, waiting at most `limit` (at exit).
pub fn shutdown(limit: Duration) {
    if let Some(provider) = PROVIDER.get() {
        let _ = provider.shutdown_with_timeout(limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn traces_only_when_an_endpoint_is_set_and_the_sdk_is_not_disabled() {
        assert_eq!(endpoint(&env(&[])), None);
        assert_eq!(
            endpoint(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])),
            None
        );
        assert_eq!(endpoint(&env(&[("OTEL_SERVICE_NAME", "x")])), None);
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/");
        assert_eq!(
            endpoint(&env(&[base])).as_deref(),
            Some("http://c:4318/v1/traces")
        );
        let traces = (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "https://c/otlp/traces",
        );
        assert_eq!(
            endpoint(&env(&[base, traces])).as_deref(),
            Some("https://c/otlp/traces")
        );
        let traces_unset = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "");
        assert_eq!(
            endpoint(&env(&[base, traces_unset])).as_deref(),
            Some("http://c:4318/v1/traces")
        );
        assert_eq!(endpoint(&env(&[base, ("OTEL_SDK_DISABLED", "true")])), None);
    }

    #[test]
    fn an_endpoint_is_an_http_url_with_a_host() {
        assert!(usable("http://127.0.0.1:4318/v1/traces"));
        assert!(usable("https://collector.internal/v1/traces"));
        assert!(!usable("collector:4318/v1/traces"));
        assert!(!usable("/v1/traces"));
        assert!(!usable("http://bad host/v1/traces"));
        assert!(!usable("grpc://collector:4317/v1/traces"));
    }

    #[test]
    fn the_service_is_webhookd_unless_named() {
        assert_eq!(service_name(&env(&[])), "webhookd");
        assert_eq!(service_name(&env(&[("OTEL_SERVICE_NAME", "")])), "webhookd");
        assert_eq!(
            service_name(&env(&[("OTEL_SERVICE_NAME", "payments-webhooks")])),
            "payments-webhooks"
        );
    }
}
