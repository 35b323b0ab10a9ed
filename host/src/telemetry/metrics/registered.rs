//! How a family set registers each of its metrics.

use prometheus_client::registry::Registry;

/// Registers `metric` under `name` with `help` and returns it: the handle
/// a family set keeps. Counters are named without `_total`: the encoder
/// appends it.
pub(super) fn registered<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    registry.register(name, help, metric.clone());
    metric
}
