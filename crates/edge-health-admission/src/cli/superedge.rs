//! SuperEdge's `edge-health-admission` flags, as the binary reads them: their table for
//! `controller_support::legacy_flags` (the translation engine, with klog's flags every
//! table has).

use controller_support::legacy_flags::{Check, LegacyTable, MASTER_URL, Takes, Translation, flag, no_custom, rename};

/// `edge-health-admission` (Go's `flag` package: `cmd/edge-health-admission/admission.go`,
/// `pkg/edge-health-admission/config`).
pub static EDGE_HEALTH_ADMISSION: LegacyTable = LegacyTable {
    binary: "edge-health-admission",
    flags: &[
        flag("admission-control-server-cert", Takes::Value, rename("--tls-cert-file", Check::Any)),
        flag("admission-control-server-key", Takes::Value, rename("--tls-private-key-file", Check::Any)),
        flag("adminssion-control-listen-addr", Takes::Value, rename("--bind-address", Check::BindAddress)),
        flag("kubeconfigpath", Takes::Value, rename("--kubeconfig", Check::Any)),
        flag("masterurl", Takes::Value, Translation::Unsupported { reason: MASTER_URL }),
        flag("always-reachable", Takes::Bool, Translation::Same),
    ],
    accumulated: &[],
    custom: no_custom,
};

#[cfg(test)]
mod tests;
