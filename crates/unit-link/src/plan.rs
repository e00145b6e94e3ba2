//! What the unit supervisor decides for a wrapper's upstream ([`Plan`]): where the objects
//! come from (the cloud API server, or the unit leader's wrapper), how the local node is
//! watched, and where the objects go besides the wrapper's cache (leading: the log the
//! followers read). The wrapper runs a plan with the same watches either way.

use std::sync::Arc;

use kube::Client;

use crate::link_health::LinkHealth;
use crate::upstream_log::UpstreamLog;
use crate::vouched::Vouching;

/// Where a wrapper's upstream objects come from and where they go besides its cache.
pub struct Plan {
    /// The cloud API server, or the unit leader's wrapper.
    pub client: Client,
    pub local_node: LocalNodeWatch,
    /// Leading the unit: the unpruned objects, for the followers.
    pub log: Option<Arc<UpstreamLog>>,
    /// Told of every stream's failures and successes.
    pub health: Arc<LinkHealth>,
    /// Whether `client` is the unit leader's wrapper (not the cloud).
    pub from_leader: bool,
    /// Vouched sharing: leading, the signer's ConfigMap goes to the log; following, every
    /// stream is checked against it.
    pub vouch: Option<Arc<Vouching>>,
}

impl Plan {
    /// Alone on `client`, as a wrapper outside any shared unit.
    pub fn alone(client: Client) -> Self {
        Self {
            client,
            local_node: LocalNodeWatch::ByName,
            log: None,
            health: Arc::default(),
            from_leader: false,
            vouch: None,
        }
    }
}

/// How the local node is watched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalNodeWatch {
    /// By name (`fieldSelector=metadata.name=<node>`).
    ByName,
    /// With the whole unit's nodes (`labelSelector=<key>=<value>`), which the leader serves
    /// its followers: one watch for the unit instead of one per node.
    Unit { label_key: String, value: String },
}
