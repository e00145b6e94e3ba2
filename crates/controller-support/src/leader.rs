//! Leader election on a coordination.k8s.io Lease, as kube-controller-manager does: one
//! instance leads, the others stand by and take over once the holder stops renewing.
//! Every decision (expiry, stepping down) is [`Candidacy`]'s; this module only reads and
//! writes the Lease, bounding every request so a hanging API server can neither keep a
//! leader past its renew deadline nor hold up shutdown.

mod candidacy;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

pub use candidacy::{Candidacy, LeaseRecord};

use crate::flags::parse_duration;

/// How long giving the Lease up on shutdown may take; past it the standbys wait out the
/// lease duration instead.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// The leader-election flags (kube-controller-manager's names and defaults), for the
/// binaries that elect a leader.
#[derive(clap::Args, Clone, Debug)]
pub struct LeaderFlags {
    /// Act only while holding the leader Lease; `--leader-elect=false` for a single
    /// instance that always acts.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease.
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    /// Name of the leader Lease (default: the binary's name).
    #[arg(long)]
    pub leader_elect_resource_name: Option<String>,
    /// How long standbys wait, after they last saw the leader renew, before taking over.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps acting without a successful renewal.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often to try to acquire or renew the Lease.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,
}

impl LeaderFlags {
    /// The election to run as `identity`, or `None` with `--leader-elect=false`. Refuses
    /// timings under which a leader could still act after a standby took over.
    pub fn config(&self, default_name: &str, identity: String) -> Result<Option<LeaderConfig>, crate::Error> {
        if !self.leader_elect {
            return Ok(None);
        }
        let (lease, renew, retry) =
            (self.leader_elect_lease_duration, self.leader_elect_renew_deadline, self.leader_elect_retry_period);
        let invalid = |why: &str| Err(crate::Error::LeaderElectionFlags(why.to_string()));
        if lease < Duration::from_secs(1) {
            return invalid("--leader-elect-lease-duration must be at least 1s");
        }
        if renew >= lease {
            return invalid("--leader-elect-renew-deadline must be shorter than --leader-elect-lease-duration");
        }
        if retry.is_zero() || renew <= retry.mul_f64(1.2) {
            return invalid(
                "--leader-elect-retry-period must be positive and under 1/1.2 of --leader-elect-renew-deadline",
            );
        }
        Ok(Some(LeaderConfig {
            namespace: self.leader_elect_resource_namespace.clone(),
            name: self.leader_elect_resource_name.clone().unwrap_or_else(|| default_name.to_string()),
            identity,
            lease_duration: lease,
            renew_deadline: renew,
            retry_period: retry,
        }))
    }
}

#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    /// Unique per process (see [`crate::runtime::identity`]): two processes sharing one
    /// would both believe they hold the Lease.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Tries to acquire or renew every retry period and publishes whether this process leads
/// on `leader` (stepping down the moment the renew deadline passes). When `shutdown`
/// turns true (or its sender goes away), gives a held Lease up so a standby takes over at
/// once, publishes `false` and returns.
pub async fn run(
    client: Client,
    config: LeaderConfig,
    leader: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut candidacy = Candidacy::new(config.identity.clone(), config.lease_duration, config.renew_deadline);
    // the Lease as we last wrote it: what a release replaces (a 409 if it changed since)
    let mut written: Option<Lease> = None;
    loop {
        let started = Instant::now();
        // woken at the renew deadline: step down before an attempt can block
        publish(&leader, candidacy.is_leading(started.into_std()), &config);
        // a standby's attempt is bounded too, or a hanging server would stall it forever
        let attempt_deadline =
            candidacy.leading_until(started.into_std()).map_or(started + config.renew_deadline, Instant::from_std);
        let attempt = tokio::time::timeout_at(attempt_deadline, try_acquire_or_renew(&api, &config, &mut candidacy));
        let outcome = tokio::select! {
            outcome = attempt => outcome,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        match outcome {
            Ok(Ok(Some(lease))) => written = Some(lease),
            Ok(Ok(None)) => {}
            Ok(Err(error)) => tracing::warn!(%error, lease = %config.name, "leader election attempt failed"),
            Err(_) => tracing::warn!(lease = %config.name, "leader election attempt timed out"),
        }
        let now = Instant::now();
        publish(&leader, candidacy.is_leading(now.into_std()), &config);
        // wake at the renew deadline if it comes first, to step down on time
        let next_attempt = now + config.retry_period;
        let wake = candidacy.leading_until(now.into_std()).map_or(next_attempt, |until| next_attempt.min(until.into()));
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = shutdown.wait_for(|stop| *stop) => break,
        }
    }
    if candidacy.holds_observed()
        && let Some(lease) = written
    {
        match tokio::time::timeout(RELEASE_TIMEOUT, release(&api, &config, lease)).await {
            Ok(Ok(())) => tracing::info!(lease = %config.name, "leader lease released"),
            Ok(Err(error)) => tracing::warn!(%error, lease = %config.name, "releasing the leader lease failed"),
            Err(_) => tracing::warn!(lease = %config.name, "releasing the leader lease timed out"),
        }
    }
    publish(&leader, false, &config);
}

fn publish(leader: &watch::Sender<bool>, leading: bool, config: &LeaderConfig) {
    leader.send_if_modified(|current| {
        let changed = *current != leading;
        if changed {
            tracing::info!(leading, identity = %config.identity, lease = %config.name, "leadership changed");
            *current = leading;
        }
        changed
    });
}

/// One round of client-go's `tryAcquireOrRenew`: read, let the candidacy judge, write
/// with the read resourceVersion (a concurrent writer makes ours a 409). Returns the
/// Lease when we wrote it.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    config: &LeaderConfig,
    candidacy: &mut Candidacy,
) -> Result<Option<Lease>, kube::Error> {
    let current = api.get_opt(&config.name).await?;
    let record = current.as_ref().map(LeaseRecord::from);
    candidacy.observe(record.clone(), Instant::now().into_std());
    if !candidacy.should_try_acquire(Instant::now().into_std()) {
        return Ok(None);
    }
    let takes_over = candidacy.takes_over(record.as_ref());
    let sent = Instant::now();
    let written = match current {
        None => {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(config.name.clone()), ..Default::default() },
                spec: Some(desired_spec(None, config, true, MicroTime(jiff::Timestamp::now()))),
            };
            api.create(&PostParams::default(), &lease).await
        }
        Some(mut lease) => {
            lease.spec = Some(desired_spec(lease.spec.take(), config, takes_over, MicroTime(jiff::Timestamp::now())));
            api.replace(&config.name, &PostParams::default(), &lease).await
        }
    };
    match written {
        Ok(lease) => {
            candidacy.renewed(LeaseRecord::from(&lease), sent.into_std(), Instant::now().into_std());
            Ok(Some(lease))
        }
        // another instance wrote first; the next read shows who
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
        Err(error) => Err(error),
    }
}

/// The Lease spec naming us as holder, renewed `now`; a take-over restarts `acquireTime`
/// and counts one more transition. Fields the election does not own are kept.
fn desired_spec(current: Option<LeaseSpec>, config: &LeaderConfig, takes_over: bool, now: MicroTime) -> LeaseSpec {
    let existed = current.is_some();
    let current = current.unwrap_or_default();
    let transitions = current.lease_transitions.unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        // standbys time us out by this: round up, never down
        lease_duration_seconds: Some(
            i32::try_from(config.lease_duration.as_secs_f64().ceil() as u64).unwrap_or(i32::MAX),
        ),
        acquire_time: if takes_over { Some(now.clone()) } else { current.acquire_time.clone() },
        renew_time: Some(now),
        lease_transitions: Some(if takes_over && existed { transitions + 1 } else { transitions }),
        ..current
    }
}

/// Gives the Lease up (no holder, as client-go's ReleaseOnCancel does) unless it changed
/// since we wrote it.
async fn release(api: &Api<Lease>, config: &LeaderConfig, mut lease: Lease) -> Result<(), kube::Error> {
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
    match api.replace(&config.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> LeaderFlags {
        LeaderFlags {
            leader_elect: true,
            leader_elect_resource_namespace: "kube-system".into(),
            leader_elect_resource_name: None,
            leader_elect_lease_duration: Duration::from_secs(15),
            leader_elect_renew_deadline: Duration::from_secs(10),
            leader_elect_retry_period: Duration::from_secs(2),
        }
    }

    #[test]
    fn flags_make_a_config_named_after_the_binary() {
        let config = flags().config("grid-controller", "host_1".into()).unwrap().unwrap();
        assert_eq!((config.namespace.as_str(), config.name.as_str()), ("kube-system", "grid-controller"));
        assert_eq!(config.identity, "host_1");
        let named = LeaderFlags { leader_elect_resource_name: Some("other".into()), ..flags() };
        assert_eq!(named.config("grid-controller", "host_1".into()).unwrap().unwrap().name, "other");
        let off = LeaderFlags { leader_elect: false, ..flags() };
        assert!(off.config("grid-controller", "host_1".into()).unwrap().is_none());
    }

    #[test]
    fn unsafe_timings_are_refused() {
        let refused = |flags: LeaderFlags| flags.config("x", "i".into()).unwrap_err().to_string();
        let renew_too_long = LeaderFlags { leader_elect_renew_deadline: Duration::from_secs(15), ..flags() };
        assert!(refused(renew_too_long).contains("--leader-elect-renew-deadline must be shorter"));
        let retry_too_long = LeaderFlags { leader_elect_retry_period: Duration::from_secs(9), ..flags() };
        assert!(refused(retry_too_long).contains("--leader-elect-retry-period"));
        let no_retry = LeaderFlags { leader_elect_retry_period: Duration::ZERO, ..flags() };
        assert!(refused(no_retry).contains("--leader-elect-retry-period"));
        let short_lease = LeaderFlags {
            leader_elect_lease_duration: Duration::from_millis(500),
            leader_elect_renew_deadline: Duration::from_millis(400),
            leader_elect_retry_period: Duration::from_millis(100),
            ..flags()
        };
        assert!(refused(short_lease).contains("at least 1s"));
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_keeps_the_acquire_time() {
        let config = flags().config("x", "me_1".into()).unwrap().unwrap();
        let acquired = MicroTime("2025-01-01T00:00:00Z".parse().unwrap());
        let now = MicroTime("2025-01-01T00:01:00Z".parse().unwrap());
        let theirs = LeaseSpec {
            holder_identity: Some("them_2".into()),
            acquire_time: Some(acquired.clone()),
            lease_transitions: Some(4),
            ..Default::default()
        };
        let taken = desired_spec(Some(theirs), &config, true, now.clone());
        assert_eq!(taken.holder_identity.as_deref(), Some("me_1"));
        assert_eq!(taken.lease_transitions, Some(5));
        assert_eq!(taken.acquire_time, Some(now.clone()));
        assert_eq!(taken.lease_duration_seconds, Some(15));

        let ours = LeaseSpec { holder_identity: Some("me_1".into()), ..taken.clone() };
        let renewed = desired_spec(Some(ours), &config, false, MicroTime("2025-01-01T00:01:02Z".parse().unwrap()));
        assert_eq!(renewed.lease_transitions, Some(5));
        assert_eq!(renewed.acquire_time, Some(now));

        let created = desired_spec(None, &config, true, MicroTime("2025-01-01T00:00:00Z".parse().unwrap()));
        assert_eq!(created.lease_transitions, Some(0));
    }
}
