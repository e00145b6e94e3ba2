//! What the self-managed certificate mode does, decided without I/O: given what the
//! Secret holds (as [`pki::inspect`](super::pki::inspect) reads it), what the
//! MutatingWebhookConfiguration's caBundle trusts and the time, use the stored
//! certificate, create the Secret, renew the serving certificate, rotate the CA, or start
//! over; which CAs the caBundle must hold, and the JSON patch (if any) that makes it so;
//! and how long to wait before looking again.
//!
//! # CA rotation
//!
//! The CA is rotated without the apiserver ever being shown a serving certificate it
//! does not trust:
//! 1. once two thirds of the CA's validity have passed, a new CA is issued and kept in
//!    the Secret as the *next* CA ([`Decision::Announce`]); the caBundle then carries
//!    both (every replica publishes what the Secret holds);
//! 2. from five sixths of the old CA's validity on, and only once every webhook's
//!    caBundle carries both CAs, the next CA becomes the CA and signs a new serving
//!    certificate; the old one is kept as a *previous* CA ([`Decision::Switch`]);
//! 3. a previous CA leaves the Secret, and so the caBundle, once it has expired
//!    ([`Decision::Retire`]): nothing it signed can be valid after that (a serving
//!    certificate never outlives its CA).
//!
//! That holds with any number of replicas because the Secret only moves forward (each
//! write at the resourceVersion read), a CA enters the caBundle only after it entered
//! the Secret, and a replica patches the caBundle only to what a Secret read *after* the
//! configuration holds, at the configuration's resourceVersion (so it never removes a
//! CA another replica published meanwhile).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use serde_json::json;

use super::facts::{CaFacts, SECRET_TYPE, SecretFacts};

/// What the apiserver trusts for the webhook: each webhook's caBundle, as certificates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Published {
    /// One set of certificates (DER) per webhook of the configuration.
    pub webhooks: Vec<BTreeSet<Vec<u8>>>,
}

impl Published {
    /// Whether every webhook's caBundle holds `der`.
    pub fn trusts(&self, der: &[u8]) -> bool {
        self.webhooks.iter().all(|bundle| bundle.contains(der))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Serve the stored certificate; look again by `renew_at` at the latest.
    Use { renew_at: SystemTime },
    /// No Secret: issue a CA and a serving certificate and create it.
    Create,
    /// Issue a new serving certificate with the stored CA and replace the Secret (at the
    /// resourceVersion read).
    Renew { reason: String },
    /// The CA cannot be used (missing, broken, expired) and no next CA can take over:
    /// issue a new CA and serving certificate and replace the Secret (at the
    /// resourceVersion read).
    StartOver { reason: String },
    /// Nothing this mode may do: the Secret is someone else's.
    Refuse { reason: String },
    /// Issue the next CA and add it to the Secret, to be published before it signs.
    Announce { reason: String },
    /// The next CA becomes the CA and signs a new serving certificate; the CA is kept as
    /// a previous one.
    Switch { reason: String },
    /// Drop the previous CAs that expired (or cannot be read) from the Secret.
    Retire { reason: String },
}

/// What to do with the Secret, given what it holds, what the caBundle trusts (`None`
/// when unknown: the configuration is absent or unreadable), the time and the names
/// the serving certificate must cover (more are fine: a replica of an older release,
/// with fewer names, must not renew back and forth with a newer one during a rolling
/// update).
pub fn decide(
    facts: &SecretFacts,
    published: Option<&Published>,
    now: SystemTime,
    wanted: &BTreeSet<String>,
) -> Decision {
    let (ca, serving, next, previous) = match facts {
        SecretFacts::Absent => return Decision::Create,
        SecretFacts::OtherType(other) => {
            return Decision::Refuse {
                reason: format!("the Secret is of type {other:?}, not {SECRET_TYPE:?}: not touching it"),
            };
        }
        SecretFacts::Tls { ca, serving, next, previous } => (ca, serving, next, previous),
    };
    let usable_next = match next {
        Some(Ok(next)) if !next.validity.expired(now) => Some(next),
        _ => None,
    };
    let ca = match ca {
        Ok(ca) if !ca.validity.expired(now) => ca,
        Ok(_) | Err(_) => {
            let problem = match ca {
                Ok(_) => "the CA has expired".to_string(),
                Err(problem) => format!("the CA cannot be used: {problem}"),
            };
            return match usable_next {
                Some(_) => Decision::Switch { reason: format!("{problem}; the next CA takes over") },
                None => Decision::StartOver { reason: problem },
            };
        }
    };
    if let Some(next) = usable_next
        && now >= ca.validity.switch_due()
        && published.is_some_and(|published| published.trusts(&ca.der) && published.trusts(&next.der))
    {
        return Decision::Switch {
            reason: "five sixths of the CA's validity have passed and every caBundle carries the next CA".into(),
        };
    }
    let serving = match serving {
        Ok(serving) => serving,
        Err(problem) => {
            return Decision::Renew { reason: format!("the serving certificate cannot be used: {problem}") };
        }
    };
    let missing: Vec<&str> = wanted.difference(&serving.names).map(String::as_str).collect();
    if !missing.is_empty() {
        return Decision::Renew { reason: format!("the serving certificate lacks {}", missing.join(", ")) };
    }
    let due = serving.validity.renewal_due();
    if now >= due {
        return Decision::Renew { reason: "two thirds of the serving certificate's validity have passed".into() };
    }
    match next {
        Some(Err(problem)) => {
            return Decision::Announce { reason: format!("the next CA cannot be used: {problem}") };
        }
        Some(Ok(next)) if next.validity.expired(now) => {
            return Decision::Announce { reason: "the next CA has expired".into() };
        }
        None if now >= ca.validity.renewal_due() => {
            return Decision::Announce { reason: "two thirds of the CA's validity have passed".into() };
        }
        _ => {}
    }
    if previous.iter().any(|previous| previous.as_ref().is_ok_and(|p| p.validity.expired(now)) || previous.is_err()) {
        return Decision::Retire { reason: "a previous CA has expired or cannot be read".into() };
    }
    Decision::Use { renew_at: look_at(facts, now).unwrap_or(due) }
}

/// When something is next due for the Secret (a renewal, the next CA, the switch once
/// published, a previous CA's expiry), if anything.
pub fn look_at(facts: &SecretFacts, now: SystemTime) -> Option<SystemTime> {
    let SecretFacts::Tls { ca, serving, next, previous } = facts else { return None };
    let ca = ca.as_ref().ok()?;
    let mut due = vec![ca.validity.not_after];
    if let Ok(serving) = serving {
        due.push(serving.validity.renewal_due());
    }
    match next {
        None => due.push(ca.validity.renewal_due()),
        Some(Ok(next)) => due.extend([ca.validity.switch_due(), next.validity.not_after]),
        Some(Err(_)) => {}
    }
    due.extend(previous.iter().flatten().map(|previous| previous.validity.not_after));
    // what is due already and waits on something else (the caBundle) is looked at by
    // the check period, not in a loop
    due.into_iter().filter(|at| *at > now).min()
}

/// The CAs the caBundle must hold for what the Secret holds, oldest first: the previous
/// ones not yet expired, the CA, the next one (an order that stays put across a switch).
pub fn trusted(facts: &SecretFacts, now: SystemTime) -> Vec<&CaFacts> {
    let SecretFacts::Tls { ca, next, previous, .. } = facts else { return Vec::new() };
    let previous = previous.iter().flatten().filter(|previous| !previous.validity.expired(now));
    previous.chain(ca.as_ref().ok()).chain(next.iter().flatten()).collect()
}

/// How long before the serving certificate is looked at again: until it is due for
/// renewal, at most `check_period`; after a failed attempt (`failures` in a row) sooner,
/// backing off from one second to 30 s (never beyond `check_period` nor the due time).
pub fn next_look(renew_at: Option<SystemTime>, now: SystemTime, check_period: Duration, failures: u32) -> Duration {
    let mut wait = check_period;
    if failures > 0 {
        let backoff = Duration::from_secs(1 << (failures - 1).min(5)).min(Duration::from_secs(30));
        wait = wait.min(backoff);
    }
    if let Some(due) = renew_at {
        wait = wait.min(due.duration_since(now).unwrap_or_default());
    }
    // a timer that fires a hair early must not spin
    wait.max(Duration::from_millis(10))
}

/// The JSON patch that sets every webhook's `clientConfig.caBundle` of `config` to
/// `bundle_pem`, or `None` when each already has it, byte for byte or as the same set
/// of certificates (or there is no webhook). Each change is guarded by a `test` of the
/// webhook's name at its index, so a configuration reordered since it was read is
/// refused (422) rather than patched at the wrong place; and the whole patch by a `test`
/// of the resourceVersion read, so a caBundle another replica changed since is never
/// overwritten from an older view.
pub fn ca_bundle_patch(config: &MutatingWebhookConfiguration, bundle_pem: &[u8]) -> Option<json_patch::Patch> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(bundle_pem);
    let wanted = super::pki::certificates(bundle_pem);
    let mut operations = Vec::new();
    for (index, webhook) in config.webhooks.iter().flatten().enumerate() {
        let current = webhook.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice());
        if current == Some(bundle_pem)
            || current.is_some_and(|current| !wanted.is_empty() && super::pki::certificates(current) == wanted)
        {
            continue;
        }
        operations.push(json!({"op": "test", "path": format!("/webhooks/{index}/name"), "value": webhook.name}));
        operations
            .push(json!({"op": "add", "path": format!("/webhooks/{index}/clientConfig/caBundle"), "value": encoded}));
    }
    if operations.is_empty() {
        return None;
    }
    if let Some(version) = &config.metadata.resource_version {
        operations.insert(0, json!({"op": "test", "path": "/metadata/resourceVersion", "value": version}));
    }
    serde_json::from_value(serde_json::Value::Array(operations)).ok()
}

/// What `config`'s webhooks trust.
pub fn published(config: &MutatingWebhookConfiguration) -> Published {
    let bundles = config.webhooks.iter().flatten();
    Published {
        webhooks: bundles
            .map(|webhook| {
                webhook.client_config.ca_bundle.as_ref().map(|b| super::pki::certificates(&b.0)).unwrap_or_default()
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configuration::{Endpoint, mutating_webhook_configuration};
    use crate::self_managed::facts::{ServingFacts, Validity};
    use k8s_openapi::ByteString;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    const WANTED: &[&str] = &["webhook.ns.svc", "webhook.ns.svc.cluster.local"];

    /// A CA known by a number: its DER is that byte, its PEM that number.
    fn ca_facts(id: u8, from: u64, to: u64) -> CaFacts {
        CaFacts {
            validity: Validity { not_before: at(from), not_after: at(to) },
            der: vec![id],
            pem: format!("CA{id}\n"),
        }
    }

    fn tls(ca: Result<(u64, u64), &str>, serving: Result<(u64, u64, &[&str]), &str>) -> SecretFacts {
        SecretFacts::Tls {
            ca: ca.map(|(from, to)| ca_facts(1, from, to)).map_err(str::to_string),
            serving: serving
                .map(|(from, to, list)| ServingFacts {
                    validity: Validity { not_before: at(from), not_after: at(to) },
                    names: names(list),
                })
                .map_err(str::to_string),
            next: None,
            previous: Vec::new(),
        }
    }

    #[test]
    fn what_to_do_with_the_secret() {
        let ca = Ok((0, 10_000));
        let extra: &[&str] = &["webhook.ns.svc", "webhook.ns.svc.cluster.local", "127.0.0.1"];
        let cases: Vec<(&str, SecretFacts, u64, Decision)> = vec![
            ("no Secret: create it", SecretFacts::Absent, 50, Decision::Create),
            (
                "someone else's Secret",
                SecretFacts::OtherType("Opaque".into()),
                50,
                Decision::Refuse {
                    reason: "the Secret is of type \"Opaque\", not \"kubernetes.io/tls\": not touching it".into(),
                },
            ),
            ("fresh", tls(ca, Ok((30, 330, WANTED))), 50, Decision::Use { renew_at: at(230) }),
            ("just before two thirds", tls(ca, Ok((30, 330, WANTED))), 229, Decision::Use { renew_at: at(230) }),
            (
                "two thirds passed",
                tls(ca, Ok((30, 330, WANTED))),
                230,
                Decision::Renew { reason: "two thirds of the serving certificate's validity have passed".into() },
            ),
            (
                "expired",
                tls(ca, Ok((30, 330, WANTED))),
                400,
                Decision::Renew { reason: "two thirds of the serving certificate's validity have passed".into() },
            ),
            ("more names than wanted", tls(ca, Ok((30, 330, extra))), 50, Decision::Use { renew_at: at(230) }),
            (
                "a wanted name is missing",
                tls(ca, Ok((30, 330, &["webhook.ns.svc"]))),
                50,
                Decision::Renew { reason: "the serving certificate lacks webhook.ns.svc.cluster.local".into() },
            ),
            (
                "serving certificate unusable",
                tls(ca, Err("not signed by the CA")),
                50,
                Decision::Renew { reason: "the serving certificate cannot be used: not signed by the CA".into() },
            ),
            (
                "CA unusable",
                tls(Err("no ca.key"), Ok((30, 330, WANTED))),
                50,
                Decision::StartOver { reason: "the CA cannot be used: no ca.key".into() },
            ),
            (
                "CA expired",
                tls(Ok((0, 100)), Ok((30, 330, WANTED))),
                100,
                Decision::StartOver { reason: "the CA has expired".into() },
            ),
            (
                // served by a replica whose clock is ahead: still used
                "not yet valid",
                tls(ca, Ok((60, 360, WANTED))),
                50,
                Decision::Use { renew_at: at(260) },
            ),
        ];
        for (name, facts, now, expected) in cases {
            assert_eq!(decide(&facts, None, at(now), &names(WANTED)), expected, "{name}");
        }
    }

    #[test]
    fn when_to_look_again() {
        let minute = Duration::from_secs(60);
        let cases: Vec<(&str, Option<u64>, u32, Duration)> = vec![
            ("due in an hour: the check period", Some(3_600), 0, minute),
            ("due in 20 s", Some(20), 0, Duration::from_secs(20)),
            ("due now", Some(0), 0, Duration::from_millis(10)),
            ("nothing served: the check period", None, 0, minute),
            ("one failure: 1 s", Some(3_600), 1, Duration::from_secs(1)),
            ("three failures: 4 s", Some(3_600), 3, Duration::from_secs(4)),
            ("many failures: 30 s", Some(3_600), 40, Duration::from_secs(30)),
            ("failures, due sooner", Some(2), 4, Duration::from_secs(2)),
        ];
        for (name, due_in, failures, expected) in cases {
            let now = at(1_000);
            let due = due_in.map(|d| at(1_000 + d));
            assert_eq!(next_look(due, now, minute, failures), expected, "{name}");
        }
        assert_eq!(next_look(Some(at(100)), at(200), minute, 0), Duration::from_millis(10), "overdue");
        assert_eq!(next_look(None, at(0), Duration::from_millis(500), 6), Duration::from_millis(500), "short period");
    }

    #[test]
    fn ca_bundle_patches() {
        let endpoint = Endpoint::Url("https://127.0.0.1:8443".into());
        let ca = b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";
        let encoded = base64::engine::general_purpose::STANDARD.encode(ca);
        let patch = |config: &MutatingWebhookConfiguration| {
            ca_bundle_patch(config, ca).map(|p| serde_json::to_value(p).expect("serialisable"))
        };

        let current = mutating_webhook_configuration("x", &endpoint, Some(ca));
        assert_eq!(patch(&current), None, "every webhook has it: no patch");

        let empty = MutatingWebhookConfiguration::default();
        assert_eq!(patch(&empty), None, "no webhooks: nothing to patch");

        let mut expected = Vec::new();
        for (index, name) in ["node-taint", "endpoint", "endpointslice"].iter().enumerate() {
            expected.push(json!({"op": "test", "path": format!("/webhooks/{index}/name"),
                "value": format!("{name}.edge-health.superedge.io")}));
            expected.push(json!({"op": "add", "path": format!("/webhooks/{index}/clientConfig/caBundle"),
                "value": encoded}));
        }
        let without = mutating_webhook_configuration("x", &endpoint, None);
        assert_eq!(patch(&without), Some(json!(expected)), "none has it: all three");
        let stale = mutating_webhook_configuration("x", &endpoint, Some(b"old CA"));
        assert_eq!(patch(&stale), Some(json!(expected)), "an old CA: all three");

        let mut one_stale = current.clone();
        one_stale.webhooks.as_mut().expect("webhooks")[1].client_config.ca_bundle = Some(ByteString(b"old".to_vec()));
        assert_eq!(
            patch(&one_stale),
            Some(json!([
                {"op": "test", "path": "/webhooks/1/name", "value": "endpoint.edge-health.superedge.io"},
                {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": encoded},
            ])),
            "only the one that differs"
        );

        // the patch applied gives the configuration with the CA everywhere
        let mut applied = serde_json::to_value(&without).expect("json");
        json_patch::patch(&mut applied, &ca_bundle_patch(&without, ca).expect("a patch")).expect("applies");
        assert_eq!(applied, serde_json::to_value(&current).expect("json"));
        // and is refused on a configuration whose webhooks moved
        let mut reordered = serde_json::to_value(&without).expect("json");
        reordered["webhooks"].as_array_mut().expect("webhooks").swap(0, 1);
        assert!(json_patch::patch(&mut reordered, &ca_bundle_patch(&without, ca).expect("a patch")).is_err());
    }

    /// The CA rotation step by step, and the protocol modelled: replicas interleaved over time.
    mod rotation {
        use super::*;
        use proptest::prelude::*;

        fn at(seconds: u64) -> SystemTime {
            SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
        }

        fn wanted() -> BTreeSet<String> {
            ["webhook.ns.svc".to_string()].into()
        }

        fn ca(id: u8, from: u64, to: u64) -> CaFacts {
            CaFacts {
                validity: Validity { not_before: at(from), not_after: at(to) },
                der: vec![id],
                pem: format!("CA{id}\n"),
            }
        }

        fn serving(from: u64, to: u64) -> Result<ServingFacts, String> {
            Ok(ServingFacts { validity: Validity { not_before: at(from), not_after: at(to) }, names: wanted() })
        }

        /// CA 1 valid 0..600 (next CA due at 400, switch at 500), serving 450..600 (renewal
        /// at 550), maybe a next CA 2 (400..1000) and previous CAs.
        fn facts(next: Option<Result<CaFacts, String>>, previous: Vec<Result<CaFacts, String>>) -> SecretFacts {
            SecretFacts::Tls { ca: Ok(ca(1, 0, 600)), serving: serving(450, 600), next, previous }
        }

        fn trusting(ids: &[u8]) -> Published {
            let bundle: BTreeSet<Vec<u8>> = ids.iter().map(|id| vec![*id]).collect();
            Published { webhooks: vec![bundle.clone(), bundle.clone(), bundle] }
        }

        #[test]
        fn each_step_of_a_ca_rotation() {
            let next = || Some(Ok(ca(2, 400, 1_000)));
            let both = trusting(&[1, 2]);
            let one_webhook_lags = Published { webhooks: vec![[vec![1], vec![2]].into(), [vec![1]].into()] };
            let announce = |reason: &str| Decision::Announce { reason: reason.into() };
            let switch = Decision::Switch {
                reason: "five sixths of the CA's validity have passed and every caBundle carries the next CA".into(),
            };
            let cases: Vec<(&str, SecretFacts, Option<Published>, u64, Decision)> = vec![
                (
                    "before two thirds: look again then",
                    facts(None, vec![]),
                    Some(trusting(&[1])),
                    350,
                    Decision::Use { renew_at: at(400) },
                ),
                (
                    "two thirds: the next CA",
                    facts(None, vec![]),
                    Some(trusting(&[1])),
                    400,
                    announce("two thirds of the CA's validity have passed"),
                ),
                (
                    "the serving certificate first",
                    facts(None, vec![]),
                    Some(trusting(&[1])),
                    560,
                    Decision::Renew { reason: "two thirds of the serving certificate's validity have passed".into() },
                ),
                (
                    "announced, published: the switch is due at five sixths",
                    facts(next(), vec![]),
                    Some(both.clone()),
                    410,
                    Decision::Use { renew_at: at(500) },
                ),
                (
                    "five sixths, every caBundle carries both: switch",
                    facts(next(), vec![]),
                    Some(both.clone()),
                    500,
                    switch.clone(),
                ),
                (
                    "five sixths, one caBundle lacks the next CA: wait (not in a loop)",
                    facts(next(), vec![]),
                    Some(one_webhook_lags),
                    500,
                    Decision::Use { renew_at: at(550) },
                ),
                (
                    "five sixths, caBundle unknown: wait",
                    facts(next(), vec![]),
                    None,
                    500,
                    Decision::Use { renew_at: at(550) },
                ),
                (
                    "five sixths, caBundle lacks the CA itself: wait",
                    facts(next(), vec![]),
                    Some(trusting(&[2])),
                    500,
                    Decision::Use { renew_at: at(550) },
                ),
                (
                    "the switch beats a renewal",
                    {
                        let SecretFacts::Tls { ca, next, previous, .. } = facts(next(), vec![]) else { unreachable!() };
                        SecretFacts::Tls { ca, serving: Err("gone".into()), next, previous }
                    },
                    Some(both.clone()),
                    500,
                    switch.clone(),
                ),
                (
                    "the CA expired, a next one: it takes over",
                    facts(next(), vec![]),
                    None,
                    600,
                    Decision::Switch { reason: "the CA has expired; the next CA takes over".into() },
                ),
                (
                    "the CA expired, no next one: start over",
                    facts(None, vec![]),
                    None,
                    600,
                    Decision::StartOver { reason: "the CA has expired".into() },
                ),
                (
                    "a broken next CA: a new one",
                    facts(Some(Err("no ca-next.key".into())), vec![]),
                    Some(both.clone()),
                    410,
                    announce("the next CA cannot be used: no ca-next.key"),
                ),
                (
                    "a previous CA still valid: kept, looked at when it expires",
                    facts(None, vec![Ok(ca(0, 0, 380))]),
                    Some(trusting(&[0, 1])),
                    350,
                    Decision::Use { renew_at: at(380) },
                ),
                (
                    "a previous CA expired: retired",
                    facts(None, vec![Ok(ca(0, 0, 380))]),
                    Some(trusting(&[0, 1])),
                    380,
                    Decision::Retire { reason: "a previous CA has expired or cannot be read".into() },
                ),
                (
                    "an unreadable previous CA: retired",
                    facts(None, vec![Err("garbage".into())]),
                    Some(trusting(&[1])),
                    350,
                    Decision::Retire { reason: "a previous CA has expired or cannot be read".into() },
                ),
            ];
            for (name, facts, published, now, expected) in cases {
                assert_eq!(decide(&facts, published.as_ref(), at(now), &wanted()), expected, "{name}");
            }
        }

        #[test]
        fn the_ca_bundle_holds_previous_ca_and_next_oldest_first() {
            let facts = facts(Some(Ok(ca(2, 400, 1_000))), vec![Ok(ca(0, 0, 380)), Err("x".into()), Ok(ca(7, 0, 900))]);
            let ids = |now| trusted(&facts, at(now)).iter().map(|ca| ca.der[0]).collect::<Vec<_>>();
            assert_eq!(ids(350), vec![0, 7, 1, 2]);
            assert_eq!(ids(380), vec![7, 1, 2], "an expired previous CA is no longer published");
            assert_eq!(trusted(&SecretFacts::Absent, at(0)), Vec::<&CaFacts>::new());
        }

        // ---- the protocol, modelled: replicas interleaved step by step over time ----

        const CA_VALIDITY: u64 = 300;
        const SERVING_VALIDITY: u64 = 60;

        #[derive(Clone, Debug)]
        struct Cert {
            id: u8,
            signer: u8,
            validity: Validity,
        }

        #[derive(Clone, Debug)]
        struct Contents {
            ca: Cert,
            serving: Cert,
            next: Option<Cert>,
            previous: Vec<Cert>,
        }

        fn ca_of(cert: &Cert) -> CaFacts {
            CaFacts { validity: cert.validity, der: vec![cert.id], pem: cert.id.to_string() }
        }

        fn facts_of(contents: Option<&Contents>) -> SecretFacts {
            let Some(c) = contents else { return SecretFacts::Absent };
            assert_eq!(c.serving.signer, c.ca.id, "the Secret's serving certificate is its CA's");
            SecretFacts::Tls {
                ca: Ok(ca_of(&c.ca)),
                serving: Ok(ServingFacts { validity: c.serving.validity, names: wanted() }),
                next: c.next.as_ref().map(|next| Ok(ca_of(next))),
                previous: c.previous.iter().map(|p| Ok(ca_of(p))).collect(),
            }
        }

        #[derive(Clone, Copy, Debug, PartialEq)]
        enum Step {
            ReadConfiguration,
            ReadSecret,
            Decide,
            PatchBundle,
        }

        #[derive(Debug)]
        struct Replica {
            step: Step,
            configuration: (u64, BTreeSet<u8>),
            secret: (u64, Option<Contents>),
            conflicts: usize,
            /// The serving certificate presented, and the CAs its Secret wants trusted.
            served: Option<(Cert, BTreeSet<u8>)>,
        }

        /// The cluster: one Secret and one caBundle (every webhook's), each with a
        /// resourceVersion; what each replica does is what `Manager` does, step by step.
        struct Cluster {
            now: u64,
            ids: u8,
            secret: (u64, Option<Contents>),
            ca_bundle: (u64, BTreeSet<u8>),
            replicas: Vec<Replica>,
            decisions: Vec<Decision>,
        }

        impl Cluster {
            /// As `pki`: backdated by a tenth (at most 300 s), never beyond the CA.
            fn issue(&mut self, signer: Option<&Cert>, validity: u64) -> Cert {
                self.ids += 1;
                let not_after = (self.now + validity).min(signer.map_or(u64::MAX, |ca| {
                    ca.validity.not_after.duration_since(SystemTime::UNIX_EPOCH).expect("after 1970").as_secs()
                }));
                let validity = Validity {
                    not_before: at(self.now.saturating_sub((validity / 10).min(300))),
                    not_after: at(not_after),
                };
                Cert { id: self.ids, signer: signer.map_or(self.ids, |ca| ca.id), validity }
            }

            /// As `Manager::sync` does for each decision: the Secret to write.
            fn written(&mut self, decision: &Decision, stored: Option<&Contents>) -> Option<Contents> {
                let now = at(self.now);
                let kept = |c: &Contents| -> (Option<Cert>, Vec<Cert>) {
                    (
                        c.next.clone().filter(|n| !n.validity.expired(now)),
                        c.previous.iter().filter(|p| !p.validity.expired(now)).cloned().collect(),
                    )
                };
                Some(match (decision, stored) {
                    (Decision::Use { .. } | Decision::Refuse { .. }, _) => return None,
                    (Decision::Create, _) | (Decision::StartOver { .. }, _) | (_, None) => {
                        let ca = self.issue(None, CA_VALIDITY);
                        let serving = self.issue(Some(&ca), SERVING_VALIDITY);
                        Contents { ca, serving, next: None, previous: Vec::new() }
                    }
                    (Decision::Renew { .. }, Some(c)) => {
                        let (next, previous) = kept(c);
                        let serving = self.issue(Some(&c.ca), SERVING_VALIDITY);
                        Contents { ca: c.ca.clone(), serving, next, previous }
                    }
                    (Decision::Announce { .. }, Some(c)) => {
                        let (_, previous) = kept(c);
                        let next = self.issue(None, CA_VALIDITY);
                        Contents { ca: c.ca.clone(), serving: c.serving.clone(), next: Some(next), previous }
                    }
                    (Decision::Switch { .. }, Some(c)) => {
                        let (next, mut previous) = kept(c);
                        let next = next.expect("a switch has a next CA");
                        if !c.ca.validity.expired(now) {
                            previous.push(c.ca.clone());
                        }
                        let serving = self.issue(Some(&next), SERVING_VALIDITY);
                        Contents { ca: next, serving, next: None, previous }
                    }
                    (Decision::Retire { .. }, Some(c)) => {
                        let (next, previous) = kept(c);
                        Contents { ca: c.ca.clone(), serving: c.serving.clone(), next, previous }
                    }
                })
            }

            fn serve(&mut self, replica: usize, contents: &Contents) {
                let trusted = trusted(&facts_of(Some(contents)), at(self.now)).iter().map(|ca| ca.der[0]).collect();
                self.replicas[replica].served = Some((contents.serving.clone(), trusted));
            }

            fn step(&mut self, index: usize) {
                let now = at(self.now);
                match self.replicas[index].step {
                    Step::ReadConfiguration => {
                        self.replicas[index].configuration = self.ca_bundle.clone();
                        self.replicas[index].conflicts = 0;
                        self.replicas[index].step = Step::ReadSecret;
                    }
                    Step::ReadSecret => {
                        self.replicas[index].secret = self.secret.clone();
                        self.replicas[index].step = Step::Decide;
                    }
                    Step::Decide => {
                        let (version, stored) = self.replicas[index].secret.clone();
                        let bundle =
                            self.replicas[index].configuration.1.iter().map(|id| vec![*id]).collect::<BTreeSet<_>>();
                        let published = Published { webhooks: vec![bundle.clone(), bundle.clone(), bundle] };
                        let decision = decide(&facts_of(stored.as_ref()), Some(&published), now, &wanted());
                        let written = self.written(&decision, stored.as_ref());
                        self.decisions.push(decision);
                        match written {
                            None => {
                                let stored = stored.expect("Use needs a Secret");
                                self.serve(index, &stored);
                                self.replicas[index].step = Step::PatchBundle;
                            }
                            // a create succeeds on no Secret, a replace at the version read
                            Some(contents) if self.secret.0 == version => {
                                self.secret = (version + 1, Some(contents.clone()));
                                self.serve(index, &contents);
                                self.replicas[index].step = Step::PatchBundle;
                            }
                            Some(_) => {
                                let replica = &mut self.replicas[index];
                                replica.conflicts += 1;
                                replica.step = if replica.conflicts < 5 { Step::ReadSecret } else { Step::PatchBundle };
                            }
                        }
                    }
                    Step::PatchBundle => {
                        let replica = &self.replicas[index];
                        if let Some((_, trusted)) = &replica.served
                            && *trusted != replica.configuration.1
                            && replica.configuration.0 == self.ca_bundle.0
                        {
                            self.ca_bundle = (self.ca_bundle.0 + 1, trusted.clone());
                        }
                        self.replicas[index].step = Step::ReadConfiguration;
                    }
                }
            }
        }

        /// Runs two replicas by `schedule` (which one steps, after how many seconds); checks
        /// after every step that, once caBundle has been set, every unexpired serving
        /// certificate a replica presents is signed by a CA caBundle holds, until the CA
        /// expired unrotated (the cluster stalled past its life: nothing keeps trust then).
        /// The decisions made.
        fn run(schedule: &[(usize, u64)]) -> Result<(Vec<Decision>, u64, BTreeSet<u8>), TestCaseError> {
            let replica = || Replica {
                step: Step::ReadConfiguration,
                configuration: (0, BTreeSet::new()),
                secret: (0, None),
                conflicts: 0,
                served: None,
            };
            let mut cluster = Cluster {
                now: 1_000,
                ids: 0,
                secret: (0, None),
                ca_bundle: (0, BTreeSet::new()),
                replicas: vec![replica(), replica()],
                decisions: Vec::new(),
            };
            let unrotated = |d: &Decision| {
                matches!(d, Decision::StartOver { .. })
                    || matches!(d, Decision::Switch { reason } if reason.contains("expired"))
            };
            let mut bootstrapped = false;
            for &(index, pause) in schedule {
                cluster.now += pause;
                cluster.step(index);
                bootstrapped |= !cluster.ca_bundle.1.is_empty();
                if !bootstrapped || cluster.decisions.iter().any(unrotated) {
                    continue;
                }
                for (r, replica) in cluster.replicas.iter().enumerate() {
                    if let Some((cert, _)) = &replica.served
                        && !cert.validity.expired(at(cluster.now))
                    {
                        prop_assert!(
                            cluster.ca_bundle.1.contains(&cert.signer),
                            "at {}: replica {r} presents a certificate of CA {} but caBundle holds {:?}",
                            cluster.now,
                            cert.signer,
                            cluster.ca_bundle.1
                        );
                    }
                }
            }
            Ok((cluster.decisions, cluster.now, cluster.ca_bundle.1))
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(300))]

            /// Trust holds over any interleaving of two replicas' steps and any pace of time,
            /// stalls of up to two minutes included (a rotation's steps are 55 s apart here).
            #[test]
            fn a_presented_certificate_is_always_trusted(
                schedule in prop::collection::vec((0usize..2, prop_oneof![8 => 0u64..=2, 2 => 0u64..=120]), 100..900),
            ) {
                run(&schedule)?;
            }

            /// And when replicas keep stepping (no stall longer than 3 s), the CA is rotated
            /// in time: never started over nor taken over expired, the first CA gone from
            /// caBundle once it expired.
            #[test]
            fn the_ca_is_rotated_in_time(schedule in prop::collection::vec((0usize..2, 0u64..=3), 300..900)) {
                let (decisions, now, ca_bundle) = run(&schedule)?;
                let count = |f: fn(&Decision) -> bool| decisions.iter().filter(|d| f(d)).count();
                prop_assert_eq!(count(|d| matches!(d, Decision::StartOver { .. })), 0);
                prop_assert_eq!(count(|d| matches!(d, Decision::Switch { reason } if reason.contains("expired"))), 0);
                prop_assert!(count(|d| matches!(d, Decision::Create)) >= 1);
                if now > 1_000 + CA_VALIDITY + 20 {
                    prop_assert!(count(|d| matches!(d, Decision::Switch { .. })) >= 1, "rotated by {}", now);
                    prop_assert!(!ca_bundle.contains(&1), "the first CA left caBundle");
                }
            }
        }
    }
}
