//! SuperEdge's `application-grid-wrapper` flags, as the binary reads them: their table for
//! `controller_support::legacy_flags` (the translation engine, with klog's flags every
//! table has) and the resolver of those that depend on others (`--insecure` and the
//! certificate files, `--service-autonomy-enhancement`).

use controller_support::legacy_flags::{
    Check, LegacyFlagError, LegacyTable, NO_CLIENT_RATE_LIMIT, Resolution, Takes, Translation, flag, ignore, invalid,
    parse_go_bool, rename,
};

/// `application-grid-wrapper` (`cmd/application-grid-wrapper/app/options`).
pub static GRID_WRAPPER: LegacyTable = LegacyTable {
    binary: "grid-wrapper",
    flags: &[
        flag("hostname", Takes::Value, rename("--node-name", Check::Any)),
        flag(
            "notify-channel-size",
            Takes::Value,
            Translation::Rename {
                to: "--watch-buffer",
                check: Check::Positive,
                note: Some(
                    "events buffered per watcher; a watcher further behind gets 410 and relists (SuperEdge dropped events)",
                ),
            },
        ),
        flag("insecure", Takes::Bool, Translation::Custom),
        flag("cert-file", Takes::Value, Translation::Custom),
        flag("key-file", Takes::Value, Translation::Custom),
        flag("ca-file", Takes::Value, Translation::Custom),
        flag("service-autonomy-enhancement", Takes::Value, Translation::Custom),
        flag("debug", Takes::Bool, ignore(Check::Bool, "no pprof handlers are served")),
        flag(
            "support-endpointslice",
            Takes::Bool,
            ignore(Check::Bool, "Endpoints and EndpointSlices are always both served"),
        ),
        flag("kube-qps", Takes::Value, ignore(Check::Float, NO_CLIENT_RATE_LIMIT)),
        flag("kube-burst", Takes::Value, ignore(Check::Int, NO_CLIENT_RATE_LIMIT)),
    ],
    accumulated: ACCUMULATED,
    custom: grid_wrapper,
};

/// Flags given as `key=value,...` whose every occurrence SuperEdge added to the same
/// settings (`ServiceAutonomyEnhancementOptions.Set`), so a later one changes only the keys
/// it names.
const ACCUMULATED: &[&str] = &["service-autonomy-enhancement"];

/// SuperEdge's edge-health address the wrapper read, and how often.
const DEFAULT_NEIGHBOR_STATUS: &str = "http://localhost:51005/localinfo";
const DEFAULT_AUTONOMY_INTERVAL: u64 = 30;

fn grid_wrapper(r: &mut Resolution<'_>) -> Result<(), LegacyFlagError> {
    // SuperEdge's default: plain HTTP to kube-proxy
    let insecure = r.value("insecure").is_none_or(|v| v == "true");
    let file = |r: &Resolution<'_>, name: &str| r.value(name).filter(|v| !v.is_empty()).map(str::to_string);
    if insecure {
        if r.value("insecure").is_some() {
            r.ignore(
                "insecure",
                "plain HTTP is our default too (HTTPS with --tls-cert-file and --tls-private-key-file)",
            );
        }
        for name in ["cert-file", "key-file", "ca-file"] {
            if r.value(name).is_some() {
                r.ignore(name, "SuperEdge served plain HTTP with --insecure (its default, true) and never read it");
            }
        }
    } else {
        let (Some(cert), Some(key)) = (file(r, "cert-file"), file(r, "key-file")) else {
            return Err(LegacyFlagError::Unsupported {
                flag: "--insecure".into(),
                value: "false".into(),
                reason: "HTTPS needs --cert-file and --key-file (SuperEdge could not serve without them either)".into(),
            });
        };
        r.replaced(
            "insecure",
            Vec::new(),
            "--tls-cert-file and --tls-private-key-file".into(),
            Some("HTTPS is served when a certificate is given".into()),
        );
        r.rename("cert-file", vec![format!("--tls-cert-file={cert}")], None);
        r.rename("key-file", vec![format!("--tls-private-key-file={key}")], None);
        if r.value("ca-file").is_some() {
            r.ignore(
                "ca-file",
                "SuperEdge set it as the server's RootCAs, which a Go TLS server never reads: clients were not asked \
                 for certificates (--client-ca-file would require them)",
            );
        }
    }

    if let Some(value) = r.value("service-autonomy-enhancement").map(str::to_string) {
        let flag = "--service-autonomy-enhancement";
        let bad = |reason: String| invalid(flag, &value, reason);
        let (mut enabled, mut address, mut interval) =
            (false, DEFAULT_NEIGHBOR_STATUS.to_string(), DEFAULT_AUTONOMY_INTERVAL);
        for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, field) = pair.split_once('=').ok_or_else(|| bad(format!("{pair:?} is not key=value")))?;
            let field = field.trim();
            match key.trim() {
                "enabled" => enabled = parse_go_bool(field).map_err(|why| bad(format!("enabled: {why}")))?,
                "address" => address = field.to_string(),
                "interval" => {
                    interval =
                        field.parse::<u64>().ok().filter(|seconds| *seconds > 0).ok_or_else(|| {
                            bad(format!("interval {field:?} is not a whole number of seconds above 0"))
                        })?
                }
                other => return Err(bad(format!("unknown key {other:?} (enabled, address, interval)"))),
            }
        }
        if enabled {
            let (url, moved) = verdicts_url(&address).map_err(bad)?;
            let note = match moved {
                true => {
                    "our edge-health serves its verdicts on /verdicts (SuperEdge's /localinfo), same scheme, host and port"
                }
                false => "the address as given",
            };
            let args = vec![format!("--edge-health-url={url}"), format!("--edge-health-poll-interval={interval}s")];
            r.rename("service-autonomy-enhancement", args, Some(note.into()));
        } else {
            r.ignore(
                "service-autonomy-enhancement",
                "enabled=false: service autonomy stays off (no --edge-health-url)",
            );
        }
    }
    Ok(())
}

/// SuperEdge's neighbour-status address as our verdicts URL: `/localinfo` becomes
/// `/verdicts` (the query goes: ours takes none); whether it did.
fn verdicts_url(address: &str) -> Result<(String, bool), String> {
    let uri: axum::http::Uri = address.parse().map_err(|_| format!("address {address:?} is not a URL"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(format!("address {address:?} is not an http:// or https:// URL"));
    };
    if !matches!(scheme, "http" | "https") {
        return Err(format!("address {address:?} is not an http:// or https:// URL"));
    }
    match uri.path() {
        "/localinfo" | "/localinfo/" => Ok((format!("{scheme}://{authority}/verdicts"), true)),
        _ => Ok((address.to_string(), false)),
    }
}

#[cfg(test)]
mod tests;
