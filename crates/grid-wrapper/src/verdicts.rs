//! Service autonomy: follows the local edge-health daemon's verdicts (`GET /verdicts`,
//! enabled by `--edge-health-url`, off by default) and drops from the served view the
//! endpoints on nodes the local unit votes down, even while the cloud cannot update the
//! slices that still list them ready.
//!
//! Verdicts are keyed by node name, as the slices' `nodeName` is (SuperEdge looked nodes up
//! by IP in data keyed by name, so its version only worked where names were IPs). The
//! decision of what to feed the cache is [`DownNodes`], pure; [`run`] does the polling.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use edgegrid_core::unit::local_verdicts::LocalVerdicts;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::Wrapper;
use crate::cache::Input;

/// Where and how often to read the verdicts.
#[derive(Clone, Debug)]
pub struct VerdictsConfig {
    /// The daemon's verdicts URL, e.g. `http://127.0.0.1:51005/verdicts`.
    pub url: http::Uri,
    pub interval: Duration,
    /// Verdicts older than this (the daemon unreachable or answering nonsense) are
    /// forgotten: every node is served again as the upstream lists it. Failing open keeps
    /// the stock behaviour rather than acting on a stale accusation.
    pub stale_after: Duration,
}

/// Decides, from each poll's outcome, the set of down nodes to serve.
#[derive(Debug)]
pub struct DownNodes {
    stale_after: Duration,
    last_good: Option<Instant>,
    serving: BTreeSet<String>,
}

impl DownNodes {
    pub fn new(stale_after: Duration) -> Self {
        Self { stale_after, last_good: None, serving: BTreeSet::new() }
    }

    /// Whether the last good poll is older than the staleness bound (or there was none).
    pub fn is_stale(&self, now: Instant) -> bool {
        self.last_good.is_none_or(|at| now.saturating_duration_since(at) >= self.stale_after)
    }

    /// The nodes served as down now.
    pub fn serving(&self) -> &BTreeSet<String> {
        &self.serving
    }

    /// Takes one poll's outcome; returns the new set to serve when it changes.
    pub fn polled(&mut self, now: Instant, outcome: Option<&LocalVerdicts>) -> Option<BTreeSet<String>> {
        let next = match outcome {
            Some(verdicts) => {
                self.last_good = Some(now);
                verdicts.down()
            }
            None if !self.is_stale(now) => return None,
            None => BTreeSet::new(),
        };
        if next == self.serving {
            return None;
        }
        self.serving = next.clone();
        Some(next)
    }
}

/// Why one poll failed.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    #[error("edge-health unreachable: {0}")]
    Unreachable(String),
    #[error("edge-health answered {0}")]
    Status(http::StatusCode),
    #[error("edge-health answered something that is not a verdicts view: {0}")]
    Malformed(serde_json::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Polls until `stop`, feeding every change of the down set to the wrapper.
pub async fn run(wrapper: Arc<Wrapper>, config: VerdictsConfig, stop: impl Future<Output = ()>) {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut down_nodes = DownNodes::new(config.stale_after);
    let mut ticks = tokio::time::interval(config.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let poll_forever = async {
        loop {
            ticks.tick().await;
            let outcome = match tokio::time::timeout(config.interval, poll(&client, &config.url)).await {
                Ok(result) => result,
                Err(_) => Err(PollError::Timeout(config.interval)),
            };
            let metrics = wrapper.metrics();
            let verdicts = match outcome {
                Ok(verdicts) => {
                    metrics.verdict_polls.get_or_create(&crate::metrics::ResultLabel { result: "ok" }).inc();
                    Some(verdicts)
                }
                Err(error) => {
                    metrics.verdict_polls.get_or_create(&crate::metrics::ResultLabel { result: "error" }).inc();
                    tracing::warn!(url = %config.url, %error, "edge-health verdicts not read");
                    None
                }
            };
            // the unit's members come from here too: the local daemon read them from the
            // API server (a leader is never asked who the members are)
            match &verdicts {
                Some(verdicts) => wrapper.set_unit_peers(edgegrid_core::unit::upstream::members_of(verdicts)),
                None if down_nodes.is_stale(Instant::now()) => wrapper.set_unit_peers(Vec::new()),
                None => {}
            }
            if let Some(down) = down_nodes.polled(Instant::now(), verdicts.as_ref()) {
                tracing::info!(down = ?down, "nodes voted down by the local unit");
                metrics.nodes_down.set(i64::try_from(down.len()).unwrap_or(i64::MAX));
                wrapper.apply(Input::NodesDown(down));
            }
        }
    };
    tokio::select! {
        () = poll_forever => {}
        () = stop => {}
    }
}

async fn poll(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    url: &http::Uri,
) -> Result<LocalVerdicts, PollError> {
    let response = client.get(url.clone()).await.map_err(|e| PollError::Unreachable(e.to_string()))?;
    if !response.status().is_success() {
        return Err(PollError::Status(response.status()));
    }
    let body = response.into_body().collect().await.map_err(|e| PollError::Unreachable(e.to_string()))?.to_bytes();
    serde_json::from_slice(&body).map_err(PollError::Malformed)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use edgegrid_core::unit::local_verdicts::{NodeVerdict, Verdict};

    use super::*;

    fn view(down: &[&str], healthy: &[&str]) -> LocalVerdicts {
        let verdict = |v| NodeVerdict { verdict: v, eligible: 3, healthy: 0, unhealthy: 0 };
        let mut nodes = BTreeMap::new();
        nodes.extend(down.iter().map(|n| (n.to_string(), verdict(Verdict::Unhealthy))));
        nodes.extend(healthy.iter().map(|n| (n.to_string(), verdict(Verdict::Healthy))));
        LocalVerdicts { node: "n1".into(), nodes, ..LocalVerdicts::default() }
    }

    fn set(names: &[&str]) -> Option<BTreeSet<String>> {
        Some(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn changes_are_fed_once_and_stale_verdicts_are_forgotten() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut down_nodes = DownNodes::new(Duration::from_secs(10));
        assert_eq!(down_nodes.polled(at(0), Some(&view(&[], &["n2"]))), None, "nothing down, nothing to say");
        assert_eq!(down_nodes.polled(at(1), Some(&view(&["n2"], &["n3"]))), set(&["n2"]));
        assert_eq!(down_nodes.polled(at(2), Some(&view(&["n2"], &["n3"]))), None, "same set again");
        // the daemon stops answering: the last verdicts hold until they are 10 s old
        assert_eq!(down_nodes.polled(at(5), None), None);
        assert_eq!(down_nodes.polled(at(11), None), None);
        assert_eq!(down_nodes.polled(at(12), None), set(&[]), "stale: every node served again");
        assert_eq!(down_nodes.polled(at(13), None), None);
        assert_eq!(down_nodes.polled(at(14), Some(&view(&["n2", "n3"], &[]))), set(&["n2", "n3"]));
        assert_eq!(down_nodes.polled(at(15), Some(&view(&[], &["n2", "n3"]))), set(&[]), "voted back up");
        assert!(down_nodes.serving().is_empty());
    }

    #[test]
    fn without_any_good_answer_nothing_is_down() {
        let mut down_nodes = DownNodes::new(Duration::from_secs(10));
        assert_eq!(down_nodes.polled(Instant::now(), None), None);
        assert!(down_nodes.serving().is_empty());
    }
}
