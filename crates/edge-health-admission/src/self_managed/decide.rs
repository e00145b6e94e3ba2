//! What the self-managed certificate mode does, decided without I/O: given what the
//! Secret holds (as [`pki::inspect`](super::pki::inspect) reads it) and the time, use the
//! stored certificate, create the Secret, renew the serving certificate or start over
//! with a new CA; given the MutatingWebhookConfiguration, the JSON patch (if any) that
//! makes every webhook's `caBundle` the CA; and how long to wait before looking again.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use serde_json::json;

/// The `type` of the Secret this mode keeps.
pub const SECRET_TYPE: &str = "kubernetes.io/tls";

/// When a certificate is valid, as written in it (whole seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Validity {
    /// Once two thirds of the validity have passed: then a serving certificate is renewed,
    /// leaving a third of it for every replica to take the new one up.
    pub fn renewal_due(&self) -> SystemTime {
        let lifetime = self.not_after.duration_since(self.not_before).unwrap_or_default();
        self.not_before + lifetime * 2 / 3
    }

    pub fn expired(&self, now: SystemTime) -> bool {
        now >= self.not_after
    }
}

/// What the Secret holds, as far as the decision goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretFacts {
    /// No such Secret.
    Absent,
    /// A Secret of another `type` (which cannot be changed in place): left alone.
    OtherType(String),
    /// A `kubernetes.io/tls` Secret; each part usable or why not.
    Tls { ca: Result<Validity, String>, serving: Result<ServingFacts, String> },
}

/// A usable serving certificate: it parses, its key is in the Secret, the CA signed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingFacts {
    pub validity: Validity,
    /// Its subject alternative names: DNS names, and IP addresses in `IpAddr` notation.
    pub names: BTreeSet<String>,
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
    /// The CA cannot be used (missing, broken, expired): issue a new CA and serving
    /// certificate and replace the Secret (at the resourceVersion read).
    StartOver { reason: String },
    /// Nothing this mode may do: the Secret is someone else's.
    Refuse { reason: String },
}

/// What to do with the Secret, given what it holds, the time and the names the serving
/// certificate must cover (more are fine: a replica of an older release, with fewer
/// names, must not renew back and forth with a newer one during a rolling update).
pub fn decide(facts: &SecretFacts, now: SystemTime, wanted: &BTreeSet<String>) -> Decision {
    let (ca, serving) = match facts {
        SecretFacts::Absent => return Decision::Create,
        SecretFacts::OtherType(other) => {
            return Decision::Refuse {
                reason: format!("the Secret is of type {other:?}, not {SECRET_TYPE:?}: not touching it"),
            };
        }
        SecretFacts::Tls { ca, serving } => (ca, serving),
    };
    let ca = match ca {
        Ok(ca) => ca,
        Err(problem) => return Decision::StartOver { reason: format!("the CA cannot be used: {problem}") },
    };
    if ca.expired(now) {
        return Decision::StartOver { reason: "the CA has expired".into() };
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
    Decision::Use { renew_at: due }
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
/// `ca_pem`, or `None` when each already has it (or there is no webhook). Each change is
/// guarded by a `test` of the webhook's name at its index, so a configuration reordered
/// since it was read is refused (422) rather than patched at the wrong place.
pub fn ca_bundle_patch(config: &MutatingWebhookConfiguration, ca_pem: &[u8]) -> Option<json_patch::Patch> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut operations = Vec::new();
    for (index, webhook) in config.webhooks.iter().flatten().enumerate() {
        if webhook.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) == Some(ca_pem) {
            continue;
        }
        operations.push(json!({"op": "test", "path": format!("/webhooks/{index}/name"), "value": webhook.name}));
        operations
            .push(json!({"op": "add", "path": format!("/webhooks/{index}/clientConfig/caBundle"), "value": encoded}));
    }
    if operations.is_empty() {
        return None;
    }
    serde_json::from_value(serde_json::Value::Array(operations)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::configuration::{Endpoint, mutating_webhook_configuration};
    use k8s_openapi::ByteString;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    const WANTED: &[&str] = &["webhook.ns.svc", "webhook.ns.svc.cluster.local"];

    fn tls(ca: Result<(u64, u64), &str>, serving: Result<(u64, u64, &[&str]), &str>) -> SecretFacts {
        SecretFacts::Tls {
            ca: ca.map(|(from, to)| Validity { not_before: at(from), not_after: at(to) }).map_err(str::to_string),
            serving: serving
                .map(|(from, to, list)| ServingFacts {
                    validity: Validity { not_before: at(from), not_after: at(to) },
                    names: names(list),
                })
                .map_err(str::to_string),
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
            assert_eq!(decide(&facts, at(now), &names(WANTED)), expected, "{name}");
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
}
