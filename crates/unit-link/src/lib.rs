//! The unit link: the grid wrappers of one node unit share one cloud upstream. Its single
//! job is to decide, and keep deciding, where a wrapper's upstream objects come from (the
//! cloud, or the wrapper its unit elected to lead) and to carry them between the unit's
//! wrappers: [`unit`] supervises that choice and hands each decided [`plan::Plan`] to the
//! wrapper it feeds (through [`unit::FedWrapper`], which `grid-wrapper` implements: the
//! link never calls the wrapper's code by name); a leader keeps the unpruned objects
//! ([`upstream_log`]) and serves them ([`unit_server`], [`replication`] for its standby);
//! followers reach it with [`unit_client`], the upstream's health per [`stream`] kept in
//! [`link_health`]. The wrappers of a unit authenticate one another by their nodes'
//! published Ed25519 keys ([`node_identity`]); with vouched sharing a follower serves only
//! the states of its leader's streams that the cloud's signer (the `unit-signer` crate)
//! vouched for ([`vouched`]). It prunes nothing and serves no kube-proxy: that is the
//! wrapper's (`grid-wrapper`), which depends on this crate, never the other way round.

pub mod api_status;
pub mod link_health;
pub mod metrics;
pub mod node_identity;
pub mod plan;
pub mod replication;
pub mod stream;
pub mod unit;
pub mod unit_client;
pub mod unit_server;
pub mod upstream_log;
pub mod vouched;
