//! The upstream's streams: the watches every wrapper runs, from the cloud or from its
//! unit's leader alike. The link keeps its health and counts its bytes per stream, and the
//! wrapper's cache takes its inputs per stream, so both name them here, once.

/// One upstream watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    Services,
    EndpointSlices,
    Endpoints,
    /// Every node, metadata only: labels decide topology.
    RemoteNodes,
    /// The local node, whole: kube-proxy reads it.
    LocalNode,
}

impl Stream {
    pub const ALL: [Stream; 5] =
        [Stream::Services, Stream::EndpointSlices, Stream::Endpoints, Stream::RemoteNodes, Stream::LocalNode];

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            Self::Services => "services",
            Self::EndpointSlices => "endpointslices",
            Self::Endpoints => "endpoints",
            Self::RemoteNodes => "nodes",
            Self::LocalNode => "localnode",
        }
    }
}
