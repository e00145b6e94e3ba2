//! Leader election on a coordination.k8s.io Lease, as kube-controller-manager does: one
//! active instance; the others take over when the holder stops renewing.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

/// The leader-election flags every controller binary takes (kube-controller-manager's names).
#[derive(clap::Args, Clone, Debug)]
pub struct LeaderFlags {
    /// Run only while holding the leader Lease.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    /// Lease name (defaults to the binary's name).
    #[arg(long)]
    pub leader_elect_resource_name: Option<String>,
    #[arg(long, default_value = "15s", value_parser = crate::flags::parse_duration)]
    pub leader_elect_lease_duration: Duration,
    #[arg(long, default_value = "2s", value_parser = crate::flags::parse_duration)]
    pub leader_elect_retry_period: Duration,
}

impl LeaderFlags {
    /// Starts leader election as `identity` (or, with `--leader-elect=false`, leads at once).
    /// Returns the leadership signal and the election task to await on shutdown.
    pub fn start(
        &self,
        client: Client,
        default_name: &str,
        identity: String,
        shutdown: watch::Receiver<bool>,
    ) -> (watch::Receiver<bool>, Option<tokio::task::JoinHandle<()>>) {
        let (leader_tx, leader_rx) = watch::channel(!self.leader_elect);
        if !self.leader_elect {
            return (leader_rx, None);
        }
        let config = LeaderConfig {
            namespace: self.leader_elect_resource_namespace.clone(),
            name: self.leader_elect_resource_name.clone().unwrap_or_else(|| default_name.to_string()),
            identity,
            lease_duration: self.leader_elect_lease_duration,
            retry_period: self.leader_elect_retry_period,
        };
        (leader_rx, Some(tokio::spawn(run(client, config, leader_tx, shutdown))))
    }
}

#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub retry_period: Duration,
}

/// Tries to acquire/renew every retry period; publishes leadership on `leader`. On
/// shutdown a held lease is released so a standby takes over at once.
pub async fn run(
    client: Client,
    config: LeaderConfig,
    leader: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut ticker = tokio::time::interval(config.retry_period);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => break,
        }
        let held = match try_acquire_or_renew(&api, &config).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!("leader election: {e}");
                false
            }
        };
        leader.send_if_modified(|current| {
            let changed = *current != held;
            if changed {
                tracing::info!(leader = held, identity = %config.identity, "leadership changed");
            }
            *current = held;
            changed
        });
    }
    if *leader.borrow() {
        let _ = release(&api, &config).await;
        leader.send_replace(false);
    }
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

async fn try_acquire_or_renew(api: &Api<Lease>, config: &LeaderConfig) -> Result<bool, kube::Error> {
    let duration_secs = config.lease_duration.as_secs().max(1) as i32;
    let Some(mut lease) = api.get_opt(&config.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta { name: Some(config.name.clone()), ..Default::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.identity.clone()),
                lease_duration_seconds: Some(duration_secs),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let expired = spec.renew_time.as_ref().is_none_or(|renewed| {
        let lasts = jiff::SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(duration_secs)));
        renewed.0 + lasts < jiff::Timestamp::now()
    });
    if holder != config.identity && !holder.is_empty() && !expired {
        return Ok(false);
    }
    if holder != config.identity {
        spec.holder_identity = Some(config.identity.clone());
        spec.acquire_time = Some(now());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.lease_duration_seconds = Some(duration_secs);
    spec.renew_time = Some(now());
    // replace carries the resourceVersion we read: a concurrent taker makes this a 409
    match api.replace(&config.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

async fn release(api: &Api<Lease>, config: &LeaderConfig) -> Result<(), kube::Error> {
    if let Some(mut lease) = api.get_opt(&config.name).await?
        && let Some(spec) = lease.spec.as_mut()
        && spec.holder_identity.as_deref() == Some(config.identity.as_str())
    {
        spec.holder_identity = None;
        spec.renew_time = None;
        api.replace(&config.name, &PostParams::default(), &lease).await?;
    }
    Ok(())
}
