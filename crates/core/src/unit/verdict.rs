//! The unit's vote, in the one place its rule is written ([`VoteRule`]), and the
//! `nodeunhealth` verdict as the cloud writes it from what each edge-health daemon
//! publishes on its own Node.
//!
//! **The rule** (both levels: a daemon's count of signed ballots, and the cloud's count of
//! the daemons' views). A verdict, protecting or condemning, needs at least two peers
//! agreeing *and* a strict majority of the peers that count. Peers that count are the
//! eligible ones with a stance: silent ones are left out (no ballot in the window, no
//! view, a view that does not know the node), and at the cloud so are members voted
//! unhealthy (a ballot leaves the daemon's window on its own; a dead member's view stays
//! on its Node). A tie, a single voice or nobody decides nothing: the verdict
//! is **Undecided**, written `nodeunhealth: "undecided"`, and the node gets stock handling.
//! Why this counting: with one liar among honest members whose ballots tell the truth, a
//! wrong verdict would need the liar and an honest peer to agree on a falsehood, so one
//! liar never decides alone; and a member that dies keeps counting with its last stance
//! until that goes stale or it is itself voted down, then stops counting, so its death
//! never turns its live neighbours' majority into a minority (with full membership as the
//! denominator, two deaths in a unit of five would unprotect every survivor). What one
//! liar can still do, per unit size, is in docs/security.md and proven by this
//! module's property tests: in a unit of `n`, with `c` dead members, it can withhold
//! protection from a live member (a tie) only when `n - 2 - c < 2`, i.e. `c >= n - 3`.
//! A unit of two has one peer per node: nobody is protected there unless the operator
//! opts in with [`VoteRule::allow_units_of_two`] (the one peer then decides alone).
//!
//! **Why the cloud writes the verdict**: an edge identity may write only its own Node (the
//! chart's ValidatingAdmissionPolicy keys it on the node name in the pod's token), and a
//! policy cannot learn which unit a requester is in, so a compromised node allowed to write
//! `nodeunhealth` on other nodes could write it on any node of any unit. Instead each
//! daemon publishes on its own Node its [`View`]
//! ([`crate::keys::EDGE_HEALTH_UNHEALTHY_VIEW_ANNOTATION`], changed only when its view
//! changes), and a cloud component that watches Nodes anyway (the admission webhook's
//! deployment) applies the rule to those views and writes the verdict: the split
//! node-feature-discovery and OVN-Kubernetes make between node agents and the one writer.
//!
//! A view lists the members its daemon holds Unhealthy and those it holds Undecided; every
//! other member of the membership it names (by [`members_version`]) it holds Healthy. The
//! membership is part of the view so that a member the daemon has not heard of yet (a node
//! that just joined) is not read as cleared by it: a view speaks only of the members it
//! knew. The cloud remembers recent memberships ([`ViewBook`]) to read views published
//! before its own watch saw a change, and keeps a voter's last readable view while a newer
//! one names a membership it has not seen yet.
//!
//! **Fresh views first.** A view is a Node's annotation: it stays when its daemon dies, and
//! when its cloud link is cut (then the node is alive but cannot update it). The cloud must
//! count those last words (a unit whose link is cut is exactly the case the edge rule is
//! for), but a dead member's last view clears the members that die with it. So the views
//! of the voters the cloud hears (Ready `True`: their daemons can publish, so their views
//! are current, and each is the unit's vote over every live member's signed ballots,
//! those of members whose link is cut included) decide first: when they reach a verdict
//! by the rule, it stands. Only when they do not (fewer than two, a tie) are all views
//! counted. Two fresh voters agreeing include an honest one, so one liar cannot use this
//! either. What stays: when a liar and one honest voter are all the cloud hears, and the
//! dead that are not yet voted down (with members whose link is cut, publishing views
//! from before the deaths) outnumber the accusers, the dead keep each other protected
//! until `maxUnreachableProtection` (the daemons' own vote, where silence does not count,
//! has no such gap: `--verdict-writer=edge`).
//!
//! The voters are the nodes running edge-health (publishing its address,
//! [`crate::unit::membership::runs_edge_health`]; the caller passes no other): a node of a
//! unit running SuperEdge's edge-health instead, mid-migration, neither votes nor is voted
//! on, as edge-health's daemons keep it out of their units. A node is judged in its home
//! unit (the lowest of its units, as edge-health's writer rule), and only when at least one
//! of that unit's members publishes a view: units whose daemons write the verdicts
//! themselves (`--verdict-writer=edge`, SuperEdge's) are left to them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, TestOperation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use crate::keys::{NODE_UNHEALTH_ANNOTATION, NODE_UNHEALTH_UNDECIDED, NODE_UNHEALTH_YES};
use crate::unit::local_verdicts::Verdict;
use crate::unit::membership::UnitId;

/// How many peers must agree: the vote's one setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VoteRule {
    /// In a unit of exactly two members, let the one peer decide alone (`false`: nobody
    /// in a unit of two is ever protected, nor condemned). An operator's explicit choice:
    /// with it, a compromised member keeps its dead partner protected, or condemns it.
    pub allow_units_of_two: bool,
}

impl VoteRule {
    /// How many agreeing peers a verdict takes in a unit of `unit_size` members.
    pub fn min_agreeing(self, unit_size: usize) -> usize {
        if self.allow_units_of_two && unit_size == 2 { 1 } else { 2 }
    }

    /// The verdict `healthy` and `unhealthy` stances of the counted peers call for, in a
    /// unit of `unit_size` members (see the module comment).
    pub fn decide(self, healthy: usize, unhealthy: usize, unit_size: usize) -> Verdict {
        let counted = healthy + unhealthy;
        let min = self.min_agreeing(unit_size);
        if unhealthy >= min && 2 * unhealthy > counted {
            Verdict::Unhealthy
        } else if healthy >= min && 2 * healthy > counted {
            Verdict::Healthy
        } else {
            Verdict::Undecided
        }
    }
}

/// A short, stable name for a membership: the first 16 hex digits of the SHA-256 of the
/// sorted, distinct names, each followed by a newline.
pub fn members_version<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: BTreeSet<&str> = names.into_iter().collect();
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for name in names {
        context.update(name.as_bytes());
        context.update(b"\n");
    }
    context.finish().as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// What one daemon publishes: its verdicts about the members of its units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// [`members_version`] of the members the daemon knows (itself included).
    pub members: String,
    pub unhealthy: BTreeSet<String>,
    pub undecided: BTreeSet<String>,
}

/// A view annotation that does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unreadable edge-health view {value:?}: want members=<version>;unhealthy=<names>;undecided=<names>")]
pub struct InvalidView {
    pub value: String,
}

impl View {
    /// The annotation's value: `members=<version>;unhealthy=a,b;undecided=c` (names sorted).
    pub fn format(&self) -> String {
        let list = |names: &BTreeSet<String>| names.iter().map(String::as_str).collect::<Vec<_>>().join(",");
        format!("members={};unhealthy={};undecided={}", self.members, list(&self.unhealthy), list(&self.undecided))
    }

    /// Reads an annotation written by [`View::format`] (blank names are skipped, unknown
    /// fields ignored; without a membership it does not read: an earlier daemon's list of
    /// names says nothing about the members it did not list).
    pub fn parse(value: &str) -> Result<Self, InvalidView> {
        let names = |list: &str| list.split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect();
        let mut view = View::default();
        let mut members = None;
        for field in value.split(';') {
            match field.split_once('=') {
                Some(("members", version)) if !version.trim().is_empty() => members = Some(version.trim().to_string()),
                Some(("unhealthy", list)) => view.unhealthy = names(list),
                Some(("undecided", list)) => view.undecided = names(list),
                _ => {}
            }
        }
        view.members = members.ok_or_else(|| InvalidView { value: value.to_string() })?;
        Ok(view)
    }
}

/// A voter's stance about one node, as its view says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stance {
    Clears,
    Accuses,
    /// Undecided about it, or it was not a member the view knew.
    Silent,
}

/// A view read against the membership it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadView {
    pub members: Arc<BTreeSet<String>>,
    pub unhealthy: BTreeSet<String>,
    pub undecided: BTreeSet<String>,
}

impl ReadView {
    pub fn stance(&self, target: &str) -> Stance {
        if !self.members.contains(target) || self.undecided.contains(target) {
            Stance::Silent
        } else if self.unhealthy.contains(target) {
            Stance::Accuses
        } else {
            Stance::Clears
        }
    }
}

/// The cloud's memory for reading views: the memberships it has seen lately (by
/// [`members_version`]) and each voter's last readable view.
#[derive(Clone, Debug, Default)]
pub struct ViewBook {
    memberships: VecDeque<(String, Arc<BTreeSet<String>>)>,
    last_read: BTreeMap<String, (String, ReadView)>,
}

impl ViewBook {
    /// How many memberships are remembered: enough for the changes one watch delay can
    /// hold (each join or leave of any unit is one).
    pub const MEMBERSHIPS: usize = 64;

    /// Remembers `members` (seen now) and returns its version.
    pub fn saw(&mut self, members: &Arc<BTreeSet<String>>) -> String {
        let version = members_version(members.iter().map(String::as_str));
        // the newest last: a membership seen again moves to the back
        self.memberships.retain(|(v, _)| *v != version);
        self.memberships.push_back((version.clone(), members.clone()));
        if self.memberships.len() > Self::MEMBERSHIPS {
            self.memberships.pop_front();
        }
        version
    }

    /// `voter`'s view as it can be read now: the annotation `raw` when it names a known
    /// membership, else the last one that did (an unreadable or unknown one keeps it; a
    /// voter publishing nothing has none).
    pub fn read(&mut self, voter: &str, raw: Option<&str>) -> Option<ReadView> {
        let Some(raw) = raw else {
            self.last_read.remove(voter);
            return None;
        };
        if let Some((seen, read)) = self.last_read.get(voter)
            && seen == raw
        {
            return Some(read.clone());
        }
        let known = View::parse(raw).ok().and_then(|view| {
            let members = self.memberships.iter().find(|(v, _)| *v == view.members)?.1.clone();
            Some(ReadView { members, unhealthy: view.unhealthy, undecided: view.undecided })
        });
        match known {
            Some(read) => {
                self.last_read.insert(voter.to_string(), (raw.to_string(), read.clone()));
                Some(read)
            }
            None => self.last_read.get(voter).map(|(_, read)| read.clone()),
        }
    }

    /// Forgets voters not in `present`.
    pub fn retain(&mut self, present: &BTreeSet<&str>) {
        self.last_read.retain(|voter, _| present.contains(voter.as_str()));
    }
}

/// One node as the cloud's vote reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Voter {
    pub name: String,
    /// The units it is in, lowest (its home unit) first.
    pub units: BTreeSet<UnitId>,
    /// Its view annotation as published (`None`: nothing yet).
    pub view: Option<String>,
    /// Its Node is voted unhealthy ([`ObservedNode::condemned`]): it no longer counts.
    pub condemned: bool,
    /// Its Node's Ready condition is `True`: the cloud hears it, so its view is current.
    pub fresh: bool,
}

/// The verdict of every node judged here (see the module comment), before comparing with
/// what its Node says. Nodes in no unit, or whose home unit publishes no view, get none.
pub fn verdicts(voters: &[Voter], book: &mut ViewBook, rule: VoteRule) -> BTreeMap<String, Verdict> {
    let mut members: BTreeMap<&UnitId, BTreeSet<String>> = BTreeMap::new();
    for voter in voters {
        for unit in &voter.units {
            members.entry(unit).or_default().insert(voter.name.clone());
        }
    }
    // each voter's view is read against the union of its units' members
    let mut unions: BTreeMap<&BTreeSet<UnitId>, Arc<BTreeSet<String>>> = BTreeMap::new();
    for voter in voters {
        if !voter.units.is_empty() && !unions.contains_key(&voter.units) {
            let union: BTreeSet<String> = voter.units.iter().flat_map(|u| members[u].iter().cloned()).collect();
            let union = Arc::new(union);
            book.saw(&union);
            unions.insert(&voter.units, union);
        }
    }
    let views: BTreeMap<&str, ReadView> =
        voters.iter().filter_map(|v| Some((v.name.as_str(), book.read(&v.name, v.view.as_deref())?))).collect();
    book.retain(&voters.iter().map(|v| v.name.as_str()).collect());
    let by_name: BTreeMap<&str, &Voter> = voters.iter().map(|v| (v.name.as_str(), v)).collect();
    let publishing: BTreeSet<&UnitId> = members
        .iter()
        .filter(|(_, names)| names.iter().any(|n| by_name[n.as_str()].view.is_some()))
        .map(|(unit, _)| *unit)
        .collect();

    let mut out = BTreeMap::new();
    for target in voters {
        let Some(home) = target.units.first() else { continue };
        if !publishing.contains(home) {
            continue;
        }
        // (healthy, unhealthy) among the fresh voters, then among all
        let (mut fresh, mut all) = ((0, 0), (0, 0));
        for name in &members[home] {
            let voter = by_name[name.as_str()];
            if voter.name == target.name || voter.condemned {
                continue;
            }
            let stance = views.get(name.as_str()).map_or(Stance::Silent, |view| view.stance(&target.name));
            for (count, counts) in [(&mut all, true), (&mut fresh, voter.fresh)] {
                match stance {
                    Stance::Clears if counts => count.0 += 1,
                    Stance::Accuses if counts => count.1 += 1,
                    _ => {}
                }
            }
        }
        let size = members[home].len();
        let verdict = match rule.decide(fresh.0, fresh.1, size) {
            Verdict::Undecided => rule.decide(all.0, all.1, size),
            decided => decided,
        };
        out.insert(target.name.clone(), verdict);
    }
    out
}

/// What the writer needs to know of a Node to patch it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedNode {
    pub name: String,
    pub resource_version: String,
    /// Whether `metadata.annotations` exists at all (a JSON patch cannot add a key to a
    /// map that is not there).
    pub has_annotations: bool,
    /// The current value of the `nodeunhealth` annotation.
    pub unhealth: Option<String>,
}

impl ObservedNode {
    pub fn from_meta(meta: &ObjectMeta) -> Self {
        Self {
            name: meta.name.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            has_annotations: meta.annotations.is_some(),
            unhealth: meta.annotations.as_ref().and_then(|a| a.get(NODE_UNHEALTH_ANNOTATION)).cloned(),
        }
    }

    /// What the annotation says to the enforcers: present, whatever its value, means not
    /// protected, as every reader reads it ([`crate::protection::voted_unhealthy`],
    /// SuperEdge's included).
    pub fn annotated_unhealthy(&self) -> bool {
        crate::protection::voted_unhealthy(self.unhealth.as_deref())
    }

    /// Voted down: annotated with any value but [`NODE_UNHEALTH_UNDECIDED`]. Such a member
    /// no longer counts as a voter; an undecided one still does (else a unit that starts
    /// undecided could never decide anything).
    pub fn condemned(&self) -> bool {
        self.annotated_unhealthy() && self.unhealth.as_deref() != Some(NODE_UNHEALTH_UNDECIDED)
    }
}

/// A JSON patch (RFC 6902) for one Node.
#[derive(Clone, Debug, PartialEq)]
pub struct AnnotationPatch {
    pub node: String,
    /// What the patch makes the annotation say.
    pub verdict: Verdict,
    pub patch: json_patch::Patch,
}

/// The smallest patch making `observed` say `verdict`, or `None` when it already does.
///
/// Healthy removes the key whatever its value. Unhealthy sets `"yes"` (creating the
/// annotation map if there is none) unless a value other than `"undecided"` is there
/// already: that reads as voted down to every reader, so it is left alone, as SuperEdge's
/// writer does. Undecided sets `"undecided"` where the key is absent or `"yes"`. Every
/// patch first tests `metadata.resourceVersion`.
pub fn annotation_patch(observed: &ObservedNode, verdict: Verdict) -> Option<AnnotationPatch> {
    let current = observed.unhealth.as_deref();
    let value = match verdict {
        Verdict::Healthy if current.is_none() => return None,
        Verdict::Healthy => None,
        Verdict::Unhealthy if observed.condemned() => return None,
        Verdict::Unhealthy => Some(NODE_UNHEALTH_YES),
        Verdict::Undecided if matches!(current, None | Some(NODE_UNHEALTH_YES)) => Some(NODE_UNHEALTH_UNDECIDED),
        Verdict::Undecided => return None,
    };
    let pointer = |tokens: &[&str]| PointerBuf::from_tokens(tokens.iter().copied());
    let key = || pointer(&["metadata", "annotations", NODE_UNHEALTH_ANNOTATION]);
    let precondition = PatchOperation::Test(TestOperation {
        path: pointer(&["metadata", "resourceVersion"]),
        value: json!(observed.resource_version),
    });
    let change = match (value, observed.has_annotations) {
        (Some(value), true) => PatchOperation::Add(AddOperation { path: key(), value: json!(value) }),
        (Some(value), false) => PatchOperation::Add(AddOperation {
            path: pointer(&["metadata", "annotations"]),
            value: json!({NODE_UNHEALTH_ANNOTATION: value}),
        }),
        (None, _) => PatchOperation::Remove(RemoveOperation { path: key() }),
    };
    Some(AnnotationPatch { node: observed.name.clone(), verdict, patch: Patch(vec![precondition, change]) })
}

#[cfg(test)]
mod tests;
