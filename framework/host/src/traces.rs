//! The relocation spans (a drain, and each unit's move in it, with their fields) exported over
//! OTLP/HTTP to a collector, beside the log: feature `otlp`, config key `otlp_endpoint`.

use ferry::NodeId;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot export spans to the OTLP endpoint {endpoint}: {reason}; check `otlp_endpoint`")]
pub struct TracesError {
    endpoint: String,
    reason: String,
}

/// The span export of one node; dropping it sends what is left.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// An exporter to `endpoint` (such as `http://collector:4318/v1/traces`), naming `node`.
    pub fn new(endpoint: &str, node: &NodeId) -> Result<Traces, TracesError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .build()
            .map_err(|e| TracesError {
                endpoint: endpoint.to_owned(),
                reason: e.to_string(),
            })?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("ferry")
            .with_attribute(opentelemetry::KeyValue::new("ferry.node", node.to_string()))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        Ok(Traces { provider })
    }

    /// The layer that turns the relocation spans (target `ferry::relocation`: a drain and each
    /// move) into OpenTelemetry spans; others stay in the log only.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + use<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a> + Send + Sync,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("ferry"))
            .with_filter(filter_fn(|meta| {
                meta.target().starts_with("ferry::relocation")
            }))
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown() {
            eprintln!("the last relocation spans were not exported: {error}");
        }
    }
}
