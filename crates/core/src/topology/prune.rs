//! Pure pruning: which endpoints of an EndpointSlice / Endpoints a node may see.
//!
//! Pruning only ever removes endpoints (or applies the documented `default/kubernetes`
//! rewrite); it never adds one and never edits a kept one. The decision is split in two
//! so the incremental view can cache it: a per-Service [`EndpointFilter`] (what the
//! policy and the local node decide, once per Service), then a per-object [`Selection`]
//! (which indices survive that filter).

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use k8s_openapi::api::core::v1::{EndpointSubset, Endpoints};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::local_endpoint::LocalEndpoint;
use super::policy::{OrderedKey, TopologyPolicy};

/// A node's labels.
pub type Labels = BTreeMap<String, String>;

/// Read access to node labels by node name, and to what the local unit knows of nodes.
pub trait NodeLabels {
    fn labels(&self, node: &str) -> Option<&Labels>;

    /// Whether the local unit's edge-health has voted `node` down: its endpoints are
    /// dropped whatever the policy (SuperEdge's "service autonomy"), even while the cloud
    /// cannot update the slices that still list them ready.
    fn is_down(&self, _node: &str) -> bool {
        false
    }
}

impl<S: BuildHasher> NodeLabels for HashMap<String, Labels, S> {
    fn labels(&self, node: &str) -> Option<&Labels> {
        self.get(node)
    }
}

impl NodeLabels for BTreeMap<String, Labels> {
    fn labels(&self, node: &str) -> Option<&Labels> {
        self.get(node)
    }
}

/// One endpoint as topology sees it: where it runs and whether it takes traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub node: Option<&'a str>,
    pub ready: bool,
}

/// The endpoints of a slice in order. `ready` follows the API: unset means ready.
pub fn slice_candidates(slice: &EndpointSlice) -> impl Iterator<Item = Candidate<'_>> {
    slice.endpoints.iter().map(|e| Candidate {
        node: e.node_name.as_deref(),
        ready: e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
    })
}

/// The addresses of core Endpoints in order: per subset, `addresses` (ready) then
/// `notReadyAddresses`.
pub fn endpoints_candidates(endpoints: &Endpoints) -> impl Iterator<Item = Candidate<'_>> {
    endpoints.subsets.iter().flatten().flat_map(|subset| {
        let ready = subset.addresses.iter().flatten().map(|a| Candidate { node: a.node_name.as_deref(), ready: true });
        let not_ready = subset
            .not_ready_addresses
            .iter()
            .flatten()
            .map(|a| Candidate { node: a.node_name.as_deref(), ready: false });
        ready.chain(not_ready)
    })
}

/// What a Service's policy decided for the local node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointFilter {
    /// Keep every endpoint (no policy, or the ordered `"*"`).
    All,
    /// Keep nothing (local node unknown or lacking every key, or no key applies).
    Nothing,
    /// Keep endpoints whose node carries any of these label pairs.
    SameValueFor(Vec<(String, String)>),
}

impl EndpointFilter {
    pub fn keeps(&self, candidate: Candidate<'_>, nodes: &impl NodeLabels) -> bool {
        if candidate.node.is_some_and(|n| nodes.is_down(n)) {
            return false;
        }
        match self {
            Self::All => true,
            Self::Nothing => false,
            Self::SameValueFor(pairs) => {
                let Some(labels) = candidate.node.and_then(|n| nodes.labels(n)) else {
                    return false;
                };
                pairs.iter().any(|(k, v)| labels.get(k) == Some(v))
            }
        }
    }
}

/// Decides the filter for one Service. `candidates` are all of the Service's endpoints
/// (every slice, or its Endpoints object); only the ordered policy looks at them.
///
/// Ordered rule: the first key the local node carries whose matches include a ready
/// endpoint wins; `"*"` wins when reached. When no key wins, the first key the local
/// node carries still applies (its endpoints may be not-ready or terminating, which
/// kube-proxy can still use for graceful shutdown); traffic never leaks to other units
/// without an explicit `"*"`.
pub fn service_filter<'a>(
    policy: &TopologyPolicy,
    local: Option<&Labels>,
    nodes: &impl NodeLabels,
    candidates: impl Iterator<Item = Candidate<'a>>,
) -> EndpointFilter {
    let local_pair = |key: &String| local.and_then(|l| l.get(key)).map(|v| (key.clone(), v.clone()));
    match policy {
        TopologyPolicy::PassThrough => EndpointFilter::All,
        TopologyPolicy::AnyKey(keys) => {
            let pairs: Vec<_> = keys.iter().filter_map(local_pair).collect();
            if pairs.is_empty() { EndpointFilter::Nothing } else { EndpointFilter::SameValueFor(pairs) }
        }
        TopologyPolicy::Ordered(keys) => {
            let ready: Vec<Candidate<'a>> = candidates.filter(|c| c.ready).collect();
            let mut first_applicable = None;
            for key in keys {
                let label = match key {
                    OrderedKey::Wildcard => return EndpointFilter::All,
                    OrderedKey::Label(label) => label,
                };
                let Some(pair) = local_pair(label) else {
                    continue;
                };
                let filter = EndpointFilter::SameValueFor(vec![pair]);
                if ready.iter().any(|c| filter.keeps(*c, nodes)) {
                    return filter;
                }
                first_applicable.get_or_insert(filter);
            }
            first_applicable.unwrap_or(EndpointFilter::Nothing)
        }
    }
}

/// Which endpoints of one object survive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// The object unchanged.
    All,
    /// Only these candidate indices, ascending (never all of them: that is `All`).
    Kept(Vec<u32>),
    /// The `default/kubernetes` local-apiserver rewrite.
    LocalRewrite(LocalEndpoint),
}

pub fn select<'a>(
    candidates: impl Iterator<Item = Candidate<'a>>,
    filter: &EndpointFilter,
    nodes: &impl NodeLabels,
) -> Selection {
    let mut total = 0usize;
    let mut kept = Vec::new();
    for (i, candidate) in candidates.enumerate() {
        total = i + 1;
        if filter.keeps(candidate, nodes) {
            kept.push(u32::try_from(i).expect("an object holds fewer than 2^32 endpoints"));
        }
    }
    if kept.len() == total { Selection::All } else { Selection::Kept(kept) }
}

/// The pruned slice. Copies only the endpoints that survive.
pub fn materialize_slice(slice: &EndpointSlice, selection: &Selection) -> EndpointSlice {
    match selection {
        Selection::All => slice.clone(),
        Selection::Kept(kept) => EndpointSlice {
            metadata: slice.metadata.clone(),
            address_type: slice.address_type.clone(),
            ports: slice.ports.clone(),
            endpoints: kept.iter().map(|&i| slice.endpoints[i as usize].clone()).collect(),
        },
        Selection::LocalRewrite(local) => local.rewrite_slice(slice),
    }
}

/// The pruned Endpoints. A subset that pruning emptied is dropped (the API never stores
/// a subset without addresses); subsets that were already empty are left alone.
pub fn materialize_endpoints(endpoints: &Endpoints, selection: &Selection) -> Endpoints {
    let kept = match selection {
        Selection::All => return endpoints.clone(),
        Selection::LocalRewrite(local) => return local.rewrite_endpoints(endpoints),
        Selection::Kept(kept) => kept,
    };
    let mut kept = kept.iter().copied().peekable();
    let mut index = 0u32;
    let mut take = |list: &Option<Vec<_>>| -> Option<Vec<_>> {
        let list = list.as_ref()?;
        let mut out = Vec::new();
        for address in list {
            if kept.peek() == Some(&index) {
                kept.next();
                out.push(Clone::clone(address));
            }
            index += 1;
        }
        Some(out)
    };
    let subsets = endpoints.subsets.as_ref().map(|subsets| {
        subsets
            .iter()
            .filter_map(|subset| {
                let before = subset.addresses.as_ref().map_or(0, Vec::len)
                    + subset.not_ready_addresses.as_ref().map_or(0, Vec::len);
                let addresses = take(&subset.addresses);
                let not_ready_addresses = take(&subset.not_ready_addresses);
                let after = addresses.as_ref().map_or(0, Vec::len) + not_ready_addresses.as_ref().map_or(0, Vec::len);
                (before == 0 || after > 0).then(|| EndpointSubset {
                    addresses,
                    not_ready_addresses,
                    ports: subset.ports.clone(),
                })
            })
            .collect()
    });
    Endpoints { metadata: endpoints.metadata.clone(), subsets }
}

/// Everything pruning needs besides the object and its policy.
pub struct PruneContext<'a, N: NodeLabels> {
    /// The local node's labels; `None` while the local node is unknown.
    pub local: Option<&'a Labels>,
    pub nodes: &'a N,
    /// Apply the `default/kubernetes` local-apiserver rewrite (wrapper runs in-cluster).
    pub rewrite_local_apiserver: bool,
}

// Manual impls: a derive would demand `N: Copy`, but only a reference to `N` is held.
impl<N: NodeLabels> Clone for PruneContext<'_, N> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<N: NodeLabels> Copy for PruneContext<'_, N> {}

/// Prunes all slices of one Service (the ordered policy decides over all of them).
/// Slices are returned in input order. `endpoints` is the Service's Endpoints object, if
/// cached: the slices of `default/kubernetes` follow its local-apiserver announcement
/// when they carry none themselves ([`LocalEndpoint::for_slice`]).
pub fn prune_service_slices<N: NodeLabels>(
    policy: &TopologyPolicy,
    slices: &[&EndpointSlice],
    endpoints: Option<&Endpoints>,
    ctx: PruneContext<'_, N>,
) -> Vec<EndpointSlice> {
    let filter = service_filter(policy, ctx.local, ctx.nodes, slices.iter().flat_map(|s| slice_candidates(s)));
    slices
        .iter()
        .map(|slice| {
            let selection = slice_selection(slice, endpoints, &filter, ctx);
            materialize_slice(slice, &selection)
        })
        .collect()
}

/// Prunes one core Endpoints object.
pub fn prune_endpoints<N: NodeLabels>(
    policy: &TopologyPolicy,
    endpoints: &Endpoints,
    ctx: PruneContext<'_, N>,
) -> Endpoints {
    let filter = service_filter(policy, ctx.local, ctx.nodes, endpoints_candidates(endpoints));
    materialize_endpoints(endpoints, &endpoints_selection(endpoints, &filter, ctx))
}

/// The selection of one object under its Service's filter, from what decides it: the
/// local endpoint the object announces (for the `default/kubernetes` rewrite) and its
/// candidates.
pub fn selection<'a, N: NodeLabels>(
    local: Option<&LocalEndpoint>,
    candidates: impl Iterator<Item = Candidate<'a>>,
    filter: &EndpointFilter,
    ctx: PruneContext<'_, N>,
) -> Selection {
    if ctx.rewrite_local_apiserver
        && let Some(local) = local
    {
        return Selection::LocalRewrite(local.clone());
    }
    select(candidates, filter, ctx.nodes)
}

/// The selection of one slice under its Service's filter; `endpoints` as for
/// [`prune_service_slices`].
pub fn slice_selection<N: NodeLabels>(
    slice: &EndpointSlice,
    endpoints: Option<&Endpoints>,
    filter: &EndpointFilter,
    ctx: PruneContext<'_, N>,
) -> Selection {
    selection(LocalEndpoint::for_slice(slice, endpoints).as_ref(), slice_candidates(slice), filter, ctx)
}

/// The selection of one Endpoints object under its Service's filter.
pub fn endpoints_selection<N: NodeLabels>(
    endpoints: &Endpoints,
    filter: &EndpointFilter,
    ctx: PruneContext<'_, N>,
) -> Selection {
    selection(LocalEndpoint::for_endpoints(endpoints).as_ref(), endpoints_candidates(endpoints), filter, ctx)
}

#[cfg(test)]
mod tests;
