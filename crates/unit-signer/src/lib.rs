//! The unit signer, the cloud side of vouched unit sharing ([`edgegrid_core::vouch`]), and
//! its single job: it watches what unit leaders watch (Services, EndpointSlices,
//! Endpoints, every Node's metadata, and the Nodes of each unit) and, once a period,
//! writes a batch of the states each stream went through, signed with its key, to the
//! ConfigMap [`BATCH_CONFIG_MAP`] that leaders serve their followers. A cloud Deployment,
//! kept out of the grid-wrapper crate every edge node runs: one replica writes (the
//! binary is leader-elected), and its key never leaves the cloud.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use controller_support::metrics::Register;
use controller_support::watch::{Index, Key, Watch};
use edgegrid_core::vouch::{
    self, BATCH_CONFIG_MAP, BATCH_DATA_KEY, Batch, Op, SIGNATURE_DATA_KEY, StateDigest, StateRecorder,
};
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::{Client, Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use ring::signature::Ed25519KeyPair;

/// A unit's unchanged state is named once in this many batches (followers keep a digest
/// for `--unit-vouch-window`, 10 s by default: more than 5 periods of 1 s).
pub const UNIT_REFRESH: u64 = 5;

/// Whether batch `sequence` names `unit`'s state even if unchanged: one batch in
/// [`UNIT_REFRESH`], the units spread over them by a hash of their name.
pub fn refreshes_in(unit: &str, sequence: u64) -> bool {
    // a run's first batch names every unit (followers of a restarted signer wait for none)
    sequence == 0
        || u64::from(edgegrid_core::vouch::sha256(unit.as_bytes())[0]) % UNIT_REFRESH == sequence % UNIT_REFRESH
}

/// The field manager of the batch ConfigMap.
pub const FIELD_MANAGER: &str = "edgegrid-unit-signer";

/// What the signer needs besides its client and key.
#[derive(Clone, Debug)]
pub struct SignerConfig {
    /// Where the batch ConfigMap lives (the wrappers' namespace).
    pub namespace: String,
    /// The node label whose value names a unit.
    pub unit_label_key: String,
    /// How often a batch is written.
    pub period: Duration,
}

/// The records of every stream: what the watches feed, what a batch takes. Pure.
#[derive(Debug, Default)]
pub struct Records {
    services: StateRecorder<Key>,
    slices: StateRecorder<Key>,
    endpoints: StateRecorder<Key>,
    node_metadata: StateRecorder<Key>,
    /// Per unit (the label's value), its Nodes.
    units: BTreeMap<String, StateRecorder<Key>>,
    /// Each Node's unit, to take it out of the old one when relabelled.
    unit_of: BTreeMap<String, String>,
    /// Whether the Node watch has completed a list, and whether one is under way: a unit
    /// first seen outside a list (a new label value) starts listed, empty.
    nodes_listed: bool,
    nodes_listing: bool,
}

impl Records {
    /// The states each stream went through since the last call, by the streams' names
    /// in a batch (a stream not listed yet is left out; a unit whose last Node left is
    /// forgotten after its empty state went out once). A unit's unchanged state is named
    /// in one batch of [`UNIT_REFRESH`] only, each unit in its turn (`sequence`): at a
    /// thousand units, naming every one each second would make the batch most of what a
    /// leader receives.
    pub fn take_states(&mut self, sequence: u64) -> Vec<(String, Vec<StateDigest>)> {
        let mut states = Vec::new();
        let cluster = [
            (vouch::SERVICES, &mut self.services),
            (vouch::ENDPOINT_SLICES, &mut self.slices),
            (vouch::ENDPOINTS, &mut self.endpoints),
            (vouch::NODE_METADATA, &mut self.node_metadata),
        ];
        for (stream, recorder) in cluster {
            if let Some(digests) = recorder.take_states() {
                states.push((stream.to_string(), digests));
            }
        }
        for (unit, recorder) in &mut self.units {
            if let Some(digests) =
                recorder.take_states_refreshing(refreshes_in(unit, sequence)).filter(|d| !d.is_empty())
            {
                states.push((vouch::unit_nodes(unit), digests));
            }
        }
        self.units.retain(|_, recorder| !recorder.is_empty());
        states
    }

    /// Takes back states a batch that could not be written carried, ahead of those
    /// recorded since (they go out with the next batch).
    pub fn give_back(&mut self, states: Vec<(String, Vec<StateDigest>)>) {
        for (stream, digests) in states {
            let recorder = match stream.as_str() {
                vouch::SERVICES => Some(&mut self.services),
                vouch::ENDPOINT_SLICES => Some(&mut self.slices),
                vouch::ENDPOINTS => Some(&mut self.endpoints),
                vouch::NODE_METADATA => Some(&mut self.node_metadata),
                other => other.strip_prefix("unit-nodes/").and_then(|unit| self.units.get_mut(unit)),
            };
            if let Some(recorder) = recorder {
                recorder.give_back(digests);
            }
        }
    }

    /// Objects per stream, for the metrics.
    fn sizes(&self) -> Vec<(String, usize)> {
        let mut sizes = vec![
            (vouch::SERVICES.to_string(), self.services.len()),
            (vouch::ENDPOINT_SLICES.to_string(), self.slices.len()),
            (vouch::ENDPOINTS.to_string(), self.endpoints.len()),
            (vouch::NODE_METADATA.to_string(), self.node_metadata.len()),
        ];
        sizes.push(("unit-nodes".to_string(), self.units.values().map(StateRecorder::len).sum()));
        sizes
    }

    /// One step of the whole-Node stream, split by unit.
    fn node_step(&mut self, label_key: &str, step: NodeStep) {
        match step {
            NodeStep::Begin => {
                self.nodes_listing = true;
                self.units.values_mut().for_each(|r| r.step(&Op::<Key, ()>::Begin));
            }
            NodeStep::Done => {
                (self.nodes_listed, self.nodes_listing) = (true, false);
                self.units.values_mut().for_each(|r| r.step(&Op::<Key, ()>::Done));
            }
            NodeStep::Apply(node) => {
                let key = Key::of(&*node);
                let unit = node.labels().get(label_key).cloned();
                if let Some(old) = self.unit_of.get(&key.name).filter(|old| Some(*old) != unit.as_ref())
                    && let Some(recorder) = self.units.get_mut(old)
                {
                    recorder.step(&Op::<Key, ()>::Delete(key.clone()));
                }
                match unit {
                    Some(unit) => {
                        let element = vouch::object_element(&vouch::unit_nodes(&unit), &*node);
                        self.unit_of.insert(key.name.clone(), unit.clone());
                        let listed = self.nodes_listed && !self.nodes_listing;
                        let recorder = self.units.entry(unit).or_insert_with(|| {
                            let mut recorder = StateRecorder::default();
                            if listed {
                                recorder.step(&Op::<Key, ()>::Begin);
                                recorder.step(&Op::<Key, ()>::Done);
                            }
                            recorder
                        });
                        recorder.step(&Op::Apply(key, element, ()));
                    }
                    None => {
                        self.unit_of.remove(&key.name);
                    }
                }
            }
            NodeStep::Delete(key) => {
                if let Some(unit) = self.unit_of.remove(&key.name)
                    && let Some(recorder) = self.units.get_mut(&unit)
                {
                    recorder.step(&Op::<Key, ()>::Delete(key));
                }
            }
        }
    }
}

enum NodeStep {
    Begin,
    Apply(Box<Node>),
    Delete(Key),
    Done,
}

/// Feeds one stream's recorder from its watch, each object's element as a follower
/// computes it ([`vouch::object_element`], [`vouch::metadata_element`]).
struct Recording<'a, K> {
    records: &'a Mutex<Records>,
    recorder: fn(&mut Records) -> &mut StateRecorder<Key>,
    stream: &'static str,
    element: fn(&str, &K) -> edgegrid_core::vouch::ElementDigest,
}

impl<K> Recording<'_, K> {
    fn step(&self, op: Op<Key, ()>) {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        (self.recorder)(&mut records).step(&op);
    }
}

impl<K: Resource> Index<K> for Recording<'_, K> {
    fn begin(&mut self) {
        self.step(Op::Begin);
    }
    fn apply(&mut self, object: K) {
        let element = (self.element)(self.stream, &object);
        self.step(Op::Apply(Key::of(&object), element, ()));
    }
    fn delete(&mut self, key: Key) {
        self.step(Op::Delete(key));
    }
    fn done(&mut self) {
        self.step(Op::Done);
    }
}

/// The whole Nodes, by unit.
struct UnitRecording<'a> {
    records: &'a Mutex<Records>,
    label_key: &'a str,
}

impl UnitRecording<'_> {
    fn step(&self, step: NodeStep) {
        self.records.lock().unwrap_or_else(PoisonError::into_inner).node_step(self.label_key, step);
    }
}

impl Index<Node> for UnitRecording<'_> {
    fn begin(&mut self) {
        self.step(NodeStep::Begin);
    }
    fn apply(&mut self, node: Node) {
        self.step(NodeStep::Apply(Box::new(node)));
    }
    fn delete(&mut self, key: Key) {
        self.step(NodeStep::Delete(key));
    }
    fn done(&mut self) {
        self.step(NodeStep::Done);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabel {
    pub stream: String,
}

/// The signer's metrics.
#[derive(Clone, Debug, Default)]
pub struct SignerMetrics {
    /// Batches written (`written`) or not (`failed`).
    pub batches: Family<ResultLabel, Counter>,
    /// Objects each stream holds (the units' Nodes together).
    pub objects: Family<StreamLabel, Gauge>,
    /// The last batch's sequence.
    pub sequence: Gauge,
}

impl Register for SignerMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register("batches", "Signed batches written to the ConfigMap, by result", self.batches.clone());
        registry.register("stream_objects", "Objects each signed stream holds", self.objects.clone());
        registry.register("sequence", "The last batch's sequence number in this run", self.sequence.clone());
    }
}

/// Runs the signer until `stop` resolves: the watches, and a batch every period.
pub async fn run(
    client: Client,
    key: Arc<Ed25519KeyPair>,
    config: SignerConfig,
    metrics: SignerMetrics,
    stop: impl std::future::Future<Output = ()>,
) {
    let records = Mutex::new(Records::default());
    let run = run_id();
    tracing::info!(run, namespace = config.namespace, period = ?config.period, "signing the unit streams");
    let watches = futures::future::join5(
        Watch::new(Api::<Service>::all(client.clone())).run(Recording {
            records: &records,
            recorder: |r| &mut r.services,
            stream: vouch::SERVICES,
            element: vouch::object_element,
        }),
        Watch::new(Api::<EndpointSlice>::all(client.clone())).run(Recording {
            records: &records,
            recorder: |r| &mut r.slices,
            stream: vouch::ENDPOINT_SLICES,
            element: vouch::object_element,
        }),
        Watch::new(Api::<Endpoints>::all(client.clone())).run(Recording {
            records: &records,
            recorder: |r| &mut r.endpoints,
            stream: vouch::ENDPOINTS,
            element: vouch::object_element,
        }),
        Watch::new(Api::<PartialObjectMeta<Node>>::all(client.clone())).named("nodes (metadata)").run(Recording {
            records: &records,
            recorder: |r| &mut r.node_metadata,
            stream: vouch::NODE_METADATA,
            element: |stream, node: &PartialObjectMeta<Node>| vouch::metadata_element(stream, &node.metadata),
        }),
        Watch::new(Api::<Node>::all(client.clone()))
            .labels(&config.unit_label_key)
            .named("unit nodes")
            .run(UnitRecording { records: &records, label_key: &config.unit_label_key }),
    );
    let publishing = async {
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &config.namespace);
        let mut ticks = tokio::time::interval(config.period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sequence = 0u64;
        loop {
            ticks.tick().await;
            let states = {
                let mut records = records.lock().unwrap_or_else(PoisonError::into_inner);
                for (stream, size) in records.sizes() {
                    metrics.objects.get_or_create(&StreamLabel { stream }).set(i64::try_from(size).unwrap_or(i64::MAX));
                }
                records.take_states(sequence)
            };
            if states.is_empty() {
                continue;
            }
            let issued = jiff::Timestamp::now().as_second();
            let signed = Batch::new(&run, sequence, issued, states.clone()).sign(&key);
            let object = serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": BATCH_CONFIG_MAP, "namespace": config.namespace},
                "data": {BATCH_DATA_KEY: signed.batch, SIGNATURE_DATA_KEY: signed.signature},
            });
            let params = PatchParams::apply(FIELD_MANAGER).force();
            match configmaps.patch(BATCH_CONFIG_MAP, &params, &Patch::Apply(&object)).await {
                Ok(_) => {
                    metrics.batches.get_or_create(&ResultLabel { result: "written" }).inc();
                    metrics.sequence.set(i64::try_from(sequence).unwrap_or(i64::MAX));
                    sequence += 1;
                }
                Err(error) => {
                    metrics.batches.get_or_create(&ResultLabel { result: "failed" }).inc();
                    tracing::warn!(%error, sequence, "cannot write the signed batch");
                    // its states go out with the next one
                    records.lock().unwrap_or_else(PoisonError::into_inner).give_back(states);
                }
            }
        }
    };
    tokio::select! {
        _ = watches => tracing::error!("the signer's watches ended"),
        () = publishing => {}
        () = stop => {}
    }
}

/// A run's random name: batches count from 0 again in each run.
fn run_id() -> String {
    let mut bytes = [0u8; 8];
    // a failing random source leaves zeros: the run is then told apart by its issue times
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    edgegrid_core::vouch::hex(&bytes)
}
