//! SuperEdge's `edge-health` flags, as the binary reads them: their table for
//! `controller_support::legacy_flags` (the translation engine, with klog's flags every
//! table has) and the resolver of those that depend on others (the check plugins, the
//! check period, the vote timeout, the exchange's retries and port).

use std::fmt::Write as _;
use std::time::Duration;

use controller_support::legacy_flags::{
    Check, LegacyFlagError, LegacyTable, MASTER_URL, Resolution, Takes, Translation, flag, ignore, invalid, rename,
    whole_number,
};
use controller_support::parse_duration;

/// `edge-health` (`pkg/edge-health/options`). SuperEdge overwrote its numeric flags with
/// their defaults after parsing; here the numbers given are the numbers used.
pub static EDGE_HEALTH: LegacyTable = LegacyTable {
    binary: "edge-health",
    flags: &[
        flag("hostname", Takes::Value, rename("--node-name", Check::Any)),
        flag("masterurl", Takes::Value, Translation::Unsupported { reason: MASTER_URL }),
        flag("kubeletauthplugin", Takes::Value, Translation::Custom),
        flag("kubeletplugin", Takes::Value, Translation::Custom),
        flag("pingplugin", Takes::Value, Translation::Custom),
        flag("healthcheckperiod", Takes::Value, Translation::Custom),
        flag(
            "healthcheckscoreline",
            Takes::Value,
            Translation::Rename {
                to: "--healthy-score",
                check: Check::PositiveFloat,
                note: Some(
                    "the same number: SuperEdge scored a passing check 100 x its weight, and its plugin flags' weights \
                     are read x100 as --check weights",
                ),
            },
        ),
        flag("voteperiod", Takes::Value, ignore(Check::Positive, "the votes are counted at every period's end")),
        flag("votetimeout", Takes::Value, Translation::Custom),
        flag(
            "communicateperiod",
            Takes::Value,
            ignore(
                Check::Positive,
                "results travel by gossip, --relay-rounds times per --period, not to every peer every N seconds",
            ),
        ),
        flag(
            "communicatetimetout",
            Takes::Value,
            Translation::Seconds {
                to: "--message-timeout",
                note: Some("per attempt of sending one message to a peer"),
            },
        ),
        flag("communicateretrytime", Takes::Value, Translation::Custom),
        flag("communicateserverport", Takes::Value, Translation::Custom),
    ],
    accumulated: &[],
    custom: edge_health,
};

/// One of SuperEdge's check plugin flags (`timeout=5,retrytime=3,weight=1,port=10250`).
#[derive(Debug, PartialEq)]
struct PluginCheck {
    kind: &'static str,
    port: u16,
    timeout_secs: u64,
    attempts: u64,
    weight: f64,
}

/// SuperEdge scored a passing check 100 points times its weight.
const SUPEREDGE_POINTS_PER_WEIGHT: f64 = 100.0;
/// SuperEdge's `--healthcheckperiod` default, seconds.
const DEFAULT_CHECK_PERIOD: u64 = 10;

impl PluginCheck {
    /// Every key must be there and valid (SuperEdge read a typo as 0), `retrytime` (its
    /// number of attempts: 0 never probed and counted as passed) at least 1.
    fn parse(plugin: &str, value: &str) -> Result<Self, LegacyFlagError> {
        let flag = format!("--{plugin}");
        let bad = |reason: String| invalid(&flag, value, reason);
        let (mut timeout, mut attempts, mut weight, mut port) = (None, None, None, None);
        for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, raw) = pair.split_once('=').ok_or_else(|| bad(format!("{pair:?} is not key=value")))?;
            let raw = raw.trim();
            let number =
                |what: &str| raw.parse::<u64>().map_err(|_| bad(format!("{what} {raw:?} is not a whole number")));
            match key.trim() {
                "timeout" => timeout = Some(number("timeout")?),
                "retrytime" => attempts = Some(number("retrytime")?),
                "weight" => {
                    weight = Some(
                        raw.parse::<f64>()
                            .ok()
                            .filter(|w| w.is_finite() && *w > 0.0)
                            .ok_or_else(|| bad(format!("weight {raw:?} is not a number above 0")))?,
                    )
                }
                "port" => {
                    port = Some(
                        raw.parse::<u16>()
                            .ok()
                            .filter(|p| *p > 0)
                            .ok_or_else(|| bad(format!("port {raw:?} is not a port number")))?,
                    )
                }
                other => return Err(bad(format!("unknown key {other:?} (timeout, retrytime, weight, port)"))),
            }
        }
        let missing = |key: &str| bad(format!("{key} is required"));
        let timeout_secs = timeout.ok_or_else(|| missing("timeout"))?;
        let attempts = attempts.ok_or_else(|| missing("retrytime"))?;
        let weight = weight.ok_or_else(|| missing("weight"))?;
        let port = port.ok_or_else(|| missing("port"))?;
        if timeout_secs == 0 {
            return Err(bad("timeout 0 would fail every check".into()));
        }
        if attempts == 0 {
            return Err(bad("retrytime 0 would never probe".into()));
        }
        let kind = match plugin {
            "kubeletauthplugin" => "kubelet",
            "kubeletplugin" => "http",
            _ => "tcp",
        };
        Ok(Self { kind, port, timeout_secs, attempts, weight })
    }

    /// Our `--check` value.
    fn check(&self) -> String {
        let mut check = format!("kind={},port={}", self.kind, self.port);
        if self.kind == "http" {
            check.push_str(",path=/healthz");
        }
        let _ = write!(
            check,
            ",timeout={}s,retries={},weight={}",
            self.timeout_secs,
            self.attempts - 1,
            self.weight * SUPEREDGE_POINTS_PER_WEIGHT
        );
        check
    }

    /// The longest it takes against one peer.
    fn worst_secs(&self) -> u64 {
        self.timeout_secs.saturating_mul(self.attempts)
    }
}

fn edge_health(r: &mut Resolution<'_>) -> Result<(), LegacyFlagError> {
    let mut plugins = Vec::new();
    for plugin in ["kubeletauthplugin", "kubeletplugin", "pingplugin"] {
        if let Some(value) = r.value(plugin) {
            plugins.push((plugin, PluginCheck::parse(plugin, value)?));
        }
    }
    let our_period = r.our_value("--period").map(str::to_string);
    let check_period = match r.value("healthcheckperiod").map(str::to_string) {
        Some(value) => {
            if our_period.is_some() {
                return Err(LegacyFlagError::Conflict {
                    legacy: "--healthcheckperiod".into(),
                    ours: "--period".into(),
                });
            }
            Some(whole_number("--healthcheckperiod", &value, 1)?)
        }
        None => None,
    };
    // SuperEdge waited the check period after each round of checks (`wait.Until`), so a
    // cycle was the round plus the period; ours are fixed periods a whole round must fit
    // in, so the period is the check period plus the longest round
    let round: u64 = plugins.iter().map(|(_, p)| p.worst_secs()).fold(0, u64::saturating_add);
    let derived = match (&our_period, check_period, plugins.is_empty()) {
        (None, Some(_), _) | (None, None, false) => {
            Some(check_period.unwrap_or(DEFAULT_CHECK_PERIOD).saturating_add(round))
        }
        _ => None,
    };
    let period_note = derived.map(|period| {
        format!(
            "SuperEdge waited its check period ({} s) after each round of checks, and a round of its plugin checks \
             takes up to {round} s: our periods are fixed and hold a whole round, so --period={period}s",
            check_period.unwrap_or(DEFAULT_CHECK_PERIOD)
        )
    });
    if let (Some(period), Some(_)) = (derived, check_period) {
        r.rename("healthcheckperiod", vec![format!("--period={period}s")], period_note.clone());
    }
    for (index, (plugin, check)) in plugins.iter().enumerate() {
        let mut args = vec![format!("--check={}", check.check())];
        let mut note = "retrytime counts attempts (retries = retrytime - 1); the weight is x100, as SuperEdge scored \
                        it, so --healthcheckscoreline keeps its number"
            .to_string();
        if let (Some(period), None) = (derived, check_period) {
            // said with every plugin flag, as no flag of the period was given
            note.push_str("; ");
            note.push_str(period_note.as_deref().unwrap_or_default());
            if index == 0 {
                args.push(format!("--period={period}s"));
            }
        }
        let by = format!("--check={}", check.check());
        r.replaced(plugin, args, by, Some(note));
    }

    if let Some(value) = r.value("votetimeout").map(str::to_string) {
        let timeout = whole_number("--votetimeout", &value, 1)?;
        let period = match (&our_period, derived) {
            // a bad --period is clap's to refuse; the window then does not matter
            (Some(ours), _) => parse_duration(ours).unwrap_or(Duration::from_secs(DEFAULT_CHECK_PERIOD)),
            (None, Some(period)) => Duration::from_secs(period),
            (None, None) => Duration::from_secs(DEFAULT_CHECK_PERIOD),
        };
        let window =
            u64::try_from(u128::from(timeout).saturating_mul(1_000_000_000).div_ceil(period.as_nanos().max(1)))
                .unwrap_or(u64::MAX)
                .max(1);
        let note = format!(
            "SuperEdge ignored results older than {timeout} s; a ballot counts for {window} periods of {period:?}"
        );
        r.rename("votetimeout", vec![format!("--vote-window={window}")], Some(note));
    }
    if let Some(value) = r.value("communicateretrytime").map(str::to_string) {
        let attempts = whole_number("--communicateretrytime", &value, 0)?;
        if attempts == 0 {
            return Err(invalid("--communicateretrytime", &value, "0 attempts would never send".into()));
        }
        let note = "SuperEdge's number counts attempts: retries = attempts - 1";
        r.rename("communicateretrytime", vec![format!("--send-retries={}", attempts - 1)], Some(note.into()));
    }
    if let Some(value) = r.value("communicateserverport").map(str::to_string) {
        let port = value
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| invalid("--communicateserverport", &value, "not a port number".into()))?;
        let note = "SuperEdge listened on every interface";
        r.rename("communicateserverport", vec![format!("--bind-address=:{port}")], Some(note.into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
