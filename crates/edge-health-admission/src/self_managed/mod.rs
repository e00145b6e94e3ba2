//! The self-managed certificate mode (`--self-managed-certificates`): the webhook issues
//! its own CA and serving certificate, shares them with its other replicas through one
//! Secret, keeps the `caBundle` of its MutatingWebhookConfiguration equal to the CAs the
//! Secret holds, renews the serving certificate before it expires and rotates the CA
//! before it expires. No cert-manager, no files.
//!
//! Each replica, in a loop ([`Manager::run`]):
//! 0. reads the MutatingWebhookConfiguration (what its caBundle trusts, and at which
//!    resourceVersion);
//! 1. reads the Secret (`kubernetes.io/tls`: `tls.crt`, `tls.key`, `ca.crt`, `ca.key`;
//!    during a CA rotation `ca-next.crt`/`ca-next.key` and `ca-previous.crt`) and
//!    [`decide`](decide::decide)s:
//!    - absent: issue a CA (valid 10 years) and a serving certificate and CREATE the
//!      Secret. A 409 means another replica created it first: read it and use theirs;
//!    - its serving certificate past two thirds of its validity (or unusable, or lacking
//!      a wanted name): issue a new one with the same CA and REPLACE the Secret at the
//!      resourceVersion read. A 409 means another replica renewed first: read theirs. So
//!      the Secret changes once per renewal, whichever replica does it;
//!    - its CA at two thirds of its validity: issue the next CA and add it; from five
//!      sixths on, once every caBundle carries it, make it the CA with a new serving
//!      certificate, keeping the old CA as a previous one until it expires (then drop
//!      it). Each step one replace at the resourceVersion read, as above; the order that
//!      keeps the apiserver's trust is in [`decide`](decide)'s module docs;
//!    - its CA unusable or expired (no next CA to take over): start over (new CA and
//!      serving certificate), the same way. The apiserver then distrusts the webhook
//!      until `caBundle` is patched, which `failurePolicy: Ignore` makes harmless but
//!      not invisible;
//!    - of another type: left alone, retried (an error in the log);
//! 2. serves the Secret's serving certificate (through the runtime's
//!    [`CertResolver`]: new connections get it at once, open ones keep theirs) and
//!    reports it served (`/readyz`);
//! 3. makes every webhook's `clientConfig.caBundle` of the configuration read in 0. the
//!    CAs of the Secret (previous ones not expired, the CA, the next one), with a JSON
//!    patch at that resourceVersion, only where it differs. The configuration is
//!    installed by the chart or an operator: when it is absent this logs and retries,
//!    never creates it;
//! 4. waits until the serving certificate is due for renewal, at most
//!    `--certificate-check-period`, or until the Secret is no longer the version served
//!    (followed by name with [`follow_object`], the one watch helper, a list then a
//!    watch: a certificate another replica renewed is served within moments), then
//!    starts over. After a failure it retries with a backoff (1 s to
//!    30 s).
//!
//! Renewal at two thirds leaves a third of the validity for the other replicas to take
//! the new certificate up; both are signed by the same CA, so the apiserver trusts
//! either and no webhook call fails during a renewal.
//!
//! Not done: a replica of an older release (which sets caBundle to the one CA it knows)
//! running during a CA rotation can remove the next CA from caBundle; the rotation then
//! waits until a current replica publishes it again, but a switch that happened in
//! between is briefly distrusted. A changed `--certificate-validity` or `--ca-validity`
//! applies from the next renewal or rotation. `--client-ca-file` (client certificates)
//! is not available in this mode.
//!
//! # RBAC
//!
//! What the webhook's ServiceAccount needs in this mode (the chart's Role and ClusterRole
//! are to be generated from this list):
//! - `secrets` in the Secret's namespace (`--certificate-secret`, default
//!   `kube-system/edge-health-admission-tls`): `get`, `list`, `watch` and `update`
//!   restricted (`resourceNames`) to that Secret's name — the list and the watch are made
//!   with the field selector `metadata.name=<name>`, which `resourceNames` authorizes —
//!   and `create`, which RBAC cannot restrict by name;
//! - `mutatingwebhookconfigurations` (`admissionregistration.k8s.io`, cluster scope):
//!   `get` and `patch` restricted to `--webhook-configuration-name` (default
//!   `edge-health-admission`);
//! - as in every mode: `list` and `watch` on `nodes`.

pub mod decide;
pub mod facts;
pub mod pki;

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use controller_support::CertResolver;
use controller_support::parse_duration;
use controller_support::watch::follow_object;
use edgegrid_core::protection::Timestamp;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::Notify;

use crate::metrics::{IssuedLabel, Metrics};
use decide::{Decision, Published, decide, next_look};
use facts::{SECRET_TYPE, SecretFacts};

/// `<namespace>/<name>`, as the flags take an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectName {
    pub namespace: String,
    pub name: String,
}

impl ObjectName {
    pub fn parse(text: &str) -> Result<Self, String> {
        let invalid = || format!("expected <namespace>/<name>, got {text:?}");
        let (namespace, name) = text.split_once('/').ok_or_else(invalid)?;
        let label = |part: &str| {
            !part.is_empty()
                && part.len() <= 253
                && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        };
        if !label(namespace) || !label(name) {
            return Err(invalid());
        }
        Ok(Self { namespace: namespace.into(), name: name.into() })
    }
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Shortest `--certificate-validity`: a third of it is what replicas have to take a
/// renewed certificate up.
pub const MIN_VALIDITY: Duration = Duration::from_secs(3);

fn parse_validity(text: &str) -> Result<Duration, String> {
    let validity = parse_duration(text)?;
    if validity < MIN_VALIDITY {
        return Err(format!("must be at least {}s", MIN_VALIDITY.as_secs()));
    }
    if validity > pki::CA_VALIDITY {
        return Err("must not be longer than 10 years (87600h)".into());
    }
    Ok(validity)
}

/// Longest `--ca-validity`: X.509 times end in 9999.
const MAX_CA_VALIDITY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn parse_ca_validity(text: &str) -> Result<Duration, String> {
    let validity = parse_duration(text)?;
    if validity < MIN_VALIDITY {
        return Err(format!("must be at least {}s", MIN_VALIDITY.as_secs()));
    }
    if validity > MAX_CA_VALIDITY {
        return Err("must not be longer than 100 years".into());
    }
    Ok(validity)
}

fn parse_period(text: &str) -> Result<Duration, String> {
    let period = parse_duration(text)?;
    if period < Duration::from_millis(100) {
        return Err("must be at least 100ms".into());
    }
    Ok(period)
}

fn parse_san(text: &str) -> Result<String, String> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    let name = text.to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && (label == "*" || label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        });
    if valid { Ok(name) } else { Err(format!("not a DNS name or an IP address: {text:?}")) }
}

/// The TLS file flags ([`controller_support::TlsFlags`]) this mode excludes. Every flag
/// of the mode conflicts with them, not only `--self-managed-certificates`: clap excuses
/// a missing `requires` target when it conflicts with a flag given.
const FILE_FLAGS: [&str; 3] = ["tls_cert_file", "tls_private_key_file", "client_ca_file"];

/// The flags of this mode, for `main` to flatten next to the TLS file flags: exactly one
/// of `--self-managed-certificates` and `--tls-cert-file` is required.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
#[command(group(
    clap::ArgGroup::new("certificate_source").args(["self_managed_certificates", "tls_cert_file"]).required(true)
))]
pub struct SelfManagedFlags {
    /// Issue and renew the serving certificate (and its CA) in-process, shared with the
    /// other replicas through --certificate-secret, and keep the caBundle of
    /// --webhook-configuration-name current. Instead of --tls-cert-file.
    #[arg(long, conflicts_with_all = FILE_FLAGS)]
    pub self_managed_certificates: bool,
    /// The `kubernetes.io/tls` Secret holding the CA and the serving certificate.
    #[arg(long, value_name = "NAMESPACE/NAME", default_value = "kube-system/edge-health-admission-tls",
        value_parser = ObjectName::parse, requires = "self_managed_certificates", conflicts_with_all = FILE_FLAGS)]
    pub certificate_secret: ObjectName,
    /// The MutatingWebhookConfiguration whose webhooks' caBundle is kept equal to the CA
    /// (installed by the chart; never created here).
    #[arg(long, value_name = "NAME", default_value = "edge-health-admission", requires = "self_managed_certificates", conflicts_with_all = FILE_FLAGS)]
    pub webhook_configuration_name: String,
    /// The Service in front of the webhook: the serving certificate is for
    /// `<name>.<namespace>.svc` and `<name>.<namespace>.svc.cluster.local`.
    #[arg(long, value_name = "NAMESPACE/NAME", default_value = "kube-system/edge-health-admission",
        value_parser = ObjectName::parse, requires = "self_managed_certificates", conflicts_with_all = FILE_FLAGS)]
    pub service: ObjectName,
    /// More DNS names or IP addresses for the serving certificate (repeat or
    /// comma-separate).
    #[arg(long = "extra-san", value_name = "NAME", value_delimiter = ',', value_parser = parse_san,
        requires = "self_managed_certificates", conflicts_with_all = FILE_FLAGS)]
    pub extra_sans: Vec<String>,
    /// How long a serving certificate is valid (Go duration); it is renewed once two
    /// thirds of that have passed.
    #[arg(long, value_name = "DURATION", default_value = "8760h", value_parser = parse_validity,
        requires = "self_managed_certificates", conflicts_with_all = FILE_FLAGS)]
    pub certificate_validity: Duration,
    /// How long a CA is valid (Go duration). The next CA is published in caBundle once
    /// two thirds of that have passed and signs from five sixths on; the old one stays
    /// trusted until it expires. A serving certificate never outlives its CA.
    #[arg(long, value_name = "DURATION", default_value = "87600h", value_parser = parse_ca_validity,
        requires = "self_managed_certificates", conflicts_with_all = FILE_FLAGS)]
    pub ca_validity: Duration,
    /// How often the Secret and the caBundle are checked at least (besides the watch of
    /// the Secret and the renewal time).
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_period,
        requires = "self_managed_certificates", conflicts_with_all = FILE_FLAGS)]
    pub certificate_check_period: Duration,
}

impl SelfManagedFlags {
    /// The mode's settings, when it is on.
    pub fn options(&self) -> Option<Options> {
        if !self.self_managed_certificates {
            return None;
        }
        let ObjectName { namespace, name } = &self.service;
        let mut names: BTreeSet<String> =
            [format!("{name}.{namespace}.svc"), format!("{name}.{namespace}.svc.cluster.local")].into();
        names.extend(self.extra_sans.iter().cloned());
        Some(Options {
            secret: self.certificate_secret.clone(),
            webhook_configuration: self.webhook_configuration_name.clone(),
            names,
            validity: self.certificate_validity,
            ca_validity: self.ca_validity,
            check_period: self.certificate_check_period,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub secret: ObjectName,
    pub webhook_configuration: String,
    /// What the serving certificate must cover.
    pub names: BTreeSet<String>,
    pub validity: Duration,
    pub ca_validity: Duration,
    pub check_period: Duration,
}

/// How many 409s in a row one look at the Secret takes before giving up until the next.
const MAX_CONFLICTS: usize = 5;
/// The label of the Secrets this mode creates.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "edge-health-admission");

#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error(transparent)]
    Pki(#[from] pki::PkiError),
    #[error("{0}")]
    Refused(String),
    #[error("the Secret kept changing under this replica ({MAX_CONFLICTS} conflicts in a row)")]
    Conflicts,
    #[error("the Secret as written cannot be used: {0}")]
    Unusable(String),
    #[error("the TLS listener refused the certificate: {0}")]
    Tls(#[from] controller_support::tls::TlsError),
}

/// The certificate this replica serves: the Secret version it came from, what caBundle
/// must trust for it, and when to renew it.
#[derive(Clone, Debug)]
struct ServedCertificate {
    resource_version: Option<String>,
    serving_cert_pem: String,
    /// The CAs caBundle must hold for the Secret served, PEM, one after the other.
    trusted_pem: String,
    renew_at: SystemTime,
}

/// Keeps the certificate served, the Secret and the caBundle current.
pub struct Manager {
    secrets: Api<Secret>,
    configurations: Api<MutatingWebhookConfiguration>,
    options: Options,
    resolver: Arc<CertResolver>,
    metrics: Arc<Metrics>,
    on_served: Box<dyn Fn() + Send + Sync>,
}

impl Manager {
    /// Serves through `resolver`; `on_served` is called whenever a certificate of the
    /// Secret is being served (the first time: ready).
    pub fn new(
        client: kube::Client,
        options: Options,
        resolver: Arc<CertResolver>,
        metrics: Arc<Metrics>,
        on_served: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        Self {
            secrets: Api::namespaced(client.clone(), &options.secret.namespace),
            configurations: Api::all(client),
            options,
            resolver,
            metrics,
            on_served: Box::new(on_served),
        }
    }

    /// Runs until dropped.
    pub async fn run(self) {
        let mut served: Option<ServedCertificate> = None;
        let mut failures = 0u32;
        let mut configuration_missing = false;
        loop {
            // read before the Secret: caBundle is only ever patched to what a later
            // Secret holds (see `decide`'s module docs)
            let configuration = self.configuration(&mut configuration_missing).await;
            let published = configuration.as_ref().map(decide::published);
            let synced = match self.sync(&mut served, published.as_ref()).await {
                Ok(()) => true,
                Err(error) => {
                    self.metrics.certificate_errors.inc();
                    tracing::warn!(secret = %self.options.secret, %error, "cannot keep the serving certificate; retrying");
                    false
                }
            };
            let bundle_current = match (&served, &configuration) {
                (Some(served), Some(configuration)) => self.ca_bundle(configuration, &served.trusted_pem).await,
                _ => false,
            };
            failures = if synced && bundle_current { 0 } else { failures.saturating_add(1) };
            let wait =
                next_look(served.as_ref().map(|s| s.renew_at), SystemTime::now(), self.options.check_period, failures);
            self.wait(served.as_ref().and_then(|s| s.resource_version.as_deref()), wait).await;
        }
    }

    /// Reads the Secret and does what [`decide`] says, until a certificate of the Secret
    /// is served.
    async fn sync(
        &self,
        served: &mut Option<ServedCertificate>,
        published: Option<&Published>,
    ) -> Result<(), SyncError> {
        let name = &self.options.secret.name;
        let (names, validity, ca_validity) = (&self.options.names, self.options.validity, self.options.ca_validity);
        for _ in 0..MAX_CONFLICTS {
            let stored = self.secrets.get_opt(name).await?;
            let now = SystemTime::now();
            let facts = pki::inspect(stored.as_ref());
            let written = match (decide(&facts, published, now, names), stored) {
                (Decision::Use { renew_at }, Some(stored)) => return self.serve(&stored, renew_at, served),
                (Decision::Refuse { reason }, _) => return Err(SyncError::Refused(reason)),
                // (decide answers Create for an absent Secret: the second pattern is that)
                (Decision::Create, _) | (_, None) => {
                    tracing::info!(secret = %self.options.secret, "no certificate Secret: issuing a CA and a serving certificate");
                    let bundle = pki::new_bundle(names, now, validity, ca_validity)?;
                    self.metrics.issued(IssuedLabel::CA);
                    self.metrics.issued(IssuedLabel::SERVING);
                    self.secrets.create(&PostParams::default(), &new_secret(&self.options.secret, &bundle)).await
                }
                (Decision::Renew { reason }, Some(stored)) => {
                    tracing::info!(secret = %self.options.secret, %reason, "renewing the serving certificate");
                    let ca = ca_only(&stored)?;
                    let serving = pki::issue_serving(&ca, names, now, validity)?;
                    self.metrics.issued(IssuedLabel::SERVING);
                    let rotation = kept_rotation(&stored, &facts, now);
                    self.replace(stored, &pki::Bundle { ca, serving }, &rotation).await
                }
                (Decision::StartOver { reason }, Some(stored)) => {
                    tracing::warn!(secret = %self.options.secret, %reason,
                        "issuing a new CA and serving certificate: the apiserver distrusts the webhook until caBundle is patched");
                    let bundle = pki::new_bundle(names, now, validity, ca_validity)?;
                    self.metrics.issued(IssuedLabel::CA);
                    self.metrics.issued(IssuedLabel::SERVING);
                    self.replace(stored, &bundle, &pki::Rotation::default()).await
                }
                (Decision::Announce { reason }, Some(stored)) => {
                    tracing::info!(secret = %self.options.secret, %reason, "issuing the next CA, to be published before it signs");
                    let bundle = pki::bundle(&stored)?;
                    let mut rotation = kept_rotation(&stored, &facts, now);
                    rotation.next = Some(pki::new_ca(now, ca_validity)?);
                    self.metrics.issued(IssuedLabel::CA);
                    self.replace(stored, &bundle, &rotation).await
                }
                (Decision::Switch { reason }, Some(stored)) => {
                    tracing::info!(secret = %self.options.secret, %reason,
                        "the next CA signs from now on; the old one stays trusted until it expires");
                    let mut rotation = kept_rotation(&stored, &facts, now);
                    let next = rotation.next.take().ok_or_else(|| SyncError::Unusable("no next CA".into()))?;
                    if let SecretFacts::Tls { ca: Ok(old), .. } = &facts
                        && !old.validity.expired(now)
                    {
                        rotation.previous.push(old.pem.clone());
                    }
                    let serving = pki::issue_serving(&next, names, now, validity)?;
                    self.metrics.issued(IssuedLabel::SERVING);
                    self.replace(stored, &pki::Bundle { ca: next, serving }, &rotation).await
                }
                (Decision::Retire { reason }, Some(stored)) => {
                    tracing::info!(secret = %self.options.secret, %reason, "dropping previous CAs");
                    let bundle = pki::bundle(&stored)?;
                    let rotation = kept_rotation(&stored, &facts, now);
                    self.replace(stored, &bundle, &rotation).await
                }
            };
            match written {
                Ok(secret) => {
                    let renew_at = look_again(&secret, now).map_err(SyncError::Unusable)?;
                    return self.serve(&secret, renew_at, served);
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    tracing::info!(secret = %self.options.secret, reason = %status.reason,
                        "the Secret was written first by someone else (another replica): reading it again");
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(SyncError::Conflicts)
    }

    /// Replaces `stored`'s data by `bundle` and `rotation`, at `stored`'s
    /// resourceVersion.
    async fn replace(
        &self,
        stored: Secret,
        bundle: &pki::Bundle,
        rotation: &pki::Rotation,
    ) -> Result<Secret, kube::Error> {
        let mut next = stored;
        let mut data = bundle.data();
        rotation.write_into(&mut data);
        next.data = Some(data);
        next.string_data = None;
        self.secrets.replace(&self.options.secret.name, &PostParams::default(), &next).await
    }

    /// Serves `secret`'s serving certificate, unless it already does.
    fn serve(
        &self,
        secret: &Secret,
        renew_at: SystemTime,
        served: &mut Option<ServedCertificate>,
    ) -> Result<(), SyncError> {
        let bundle = pki::bundle(secret)?;
        let unchanged = served.as_ref().is_some_and(|s| s.serving_cert_pem == bundle.serving.cert_pem);
        if !unchanged {
            self.resolver.set_pem(bundle.serving.cert_pem.as_bytes(), bundle.serving.key_pem.as_bytes())?;
            let expires = match pki::inspect(Some(secret)) {
                SecretFacts::Tls { serving: Ok(serving), .. } => Some(serving.validity.not_after),
                _ => None,
            };
            if let Some(expires) = expires.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()) {
                self.metrics.certificate_expiry.set(i64::try_from(expires.as_secs()).unwrap_or(i64::MAX));
            }
            tracing::info!(
                secret = %self.options.secret,
                resource_version = secret.metadata.resource_version.as_deref().unwrap_or_default(),
                expires = %expires.and_then(|t| Timestamp::try_from(t).ok()).map(|t| t.to_string()).unwrap_or_default(),
                renew_at = %Timestamp::try_from(renew_at).map(|t| t.to_string()).unwrap_or_default(),
                "serving the certificate of the Secret"
            );
        }
        let facts = pki::inspect(Some(secret));
        let trusted: String =
            decide::trusted(&facts, SystemTime::now()).into_iter().map(|ca| ca.pem.as_str()).collect();
        *served = Some(ServedCertificate {
            resource_version: secret.metadata.resource_version.clone(),
            serving_cert_pem: bundle.serving.cert_pem,
            trusted_pem: trusted,
            renew_at,
        });
        (self.on_served)();
        Ok(())
    }

    /// The MutatingWebhookConfiguration, `None` when absent or unreadable (logged).
    async fn configuration(&self, missing: &mut bool) -> Option<MutatingWebhookConfiguration> {
        let name = &self.options.webhook_configuration;
        match self.configurations.get_opt(name).await {
            Ok(Some(configuration)) => {
                *missing = false;
                Some(configuration)
            }
            Ok(None) => {
                if !*missing {
                    tracing::warn!(configuration = %name,
                        "the MutatingWebhookConfiguration does not exist (the chart installs it); retrying");
                }
                *missing = true;
                None
            }
            Err(error) => {
                tracing::warn!(configuration = %name, %error, "cannot read the MutatingWebhookConfiguration; retrying");
                None
            }
        }
    }

    /// Patches every webhook's caBundle of `configuration` (as read, at its
    /// resourceVersion) to `trusted_pem` where it differs; whether they all have it now.
    async fn ca_bundle(&self, configuration: &MutatingWebhookConfiguration, trusted_pem: &str) -> bool {
        let name = &self.options.webhook_configuration;
        let Some(patch) = decide::ca_bundle_patch(configuration, trusted_pem.as_bytes()) else { return true };
        let webhooks =
            patch.0.iter().filter(|operation| matches!(operation, json_patch::PatchOperation::Add(_))).count();
        match self.configurations.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
            Ok(_) => {
                self.metrics.ca_bundle_patches.inc();
                tracing::info!(configuration = %name, webhooks, "caBundle set to the Secret's CAs");
                true
            }
            Err(error) => {
                tracing::warn!(configuration = %name, %error, "cannot patch caBundle (changed since read?); retrying");
                false
            }
        }
    }

    /// Waits `wait`, or less when the Secret is no longer at `resource_version` (changed
    /// or deleted). It is followed by name through the one watch helper, which owns the
    /// retries, backoff and relists: its first list ends the wait at once when the Secret
    /// changed before the wait began, and a relist (after a 410, or an API server whose
    /// versions went back) ends it only if the Secret is not the one served.
    async fn wait(&self, resource_version: Option<&str>, wait: Duration) {
        let Some(served) = resource_version else {
            tokio::time::sleep(wait).await;
            return;
        };
        let changed = Notify::new();
        let follow = follow_object(
            self.secrets.clone(),
            &self.options.secret.name,
            |secret: Option<&Secret>| {
                if secret.and_then(|secret| secret.metadata.resource_version.as_deref()) != Some(served) {
                    changed.notify_one();
                }
            },
            || {},
        );
        tokio::select! {
            () = follow => {}
            () = changed.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// The CA of a Secret (whose serving certificate may be missing or broken).
fn ca_only(secret: &Secret) -> Result<pki::Pair, SyncError> {
    let text = |key: &'static str| {
        secret
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .and_then(|value| String::from_utf8(value.0.clone()).ok())
            .ok_or(pki::PkiError::Missing(key))
    };
    Ok(pki::Pair { cert_pem: text(pki::CA_CERT)?, key_pem: text(pki::CA_KEY)? })
}

/// When `secret`, as written, is to be looked at again.
fn look_again(secret: &Secret, now: SystemTime) -> Result<SystemTime, String> {
    let facts = pki::inspect(Some(secret));
    match &facts {
        SecretFacts::Tls { ca: Ok(_), serving: Ok(serving), .. } => {
            Ok(decide::look_at(&facts, now).unwrap_or(serving.validity.renewal_due()))
        }
        SecretFacts::Tls { ca: Err(problem), .. } | SecretFacts::Tls { serving: Err(problem), .. } => {
            Err(problem.clone())
        }
        other => Err(format!("{other:?}")),
    }
}

/// What of `stored`'s rotation a write keeps: the next CA if usable, the previous CAs
/// not expired.
fn kept_rotation(stored: &Secret, facts: &SecretFacts, now: SystemTime) -> pki::Rotation {
    let SecretFacts::Tls { next, previous, .. } = facts else { return pki::Rotation::default() };
    let usable_next = matches!(next, Some(Ok(next)) if !next.validity.expired(now));
    pki::Rotation {
        next: pki::rotation(stored).next.filter(|_| usable_next),
        previous: previous.iter().flatten().filter(|p| !p.validity.expired(now)).map(|p| p.pem.clone()).collect(),
    }
}

fn new_secret(name: &ObjectName, bundle: &pki::Bundle) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.name.clone()),
            namespace: Some(name.namespace.clone()),
            labels: Some([(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string())].into()),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(bundle.data()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Flags {
        #[command(flatten)]
        tls: controller_support::TlsFlags,
        #[command(flatten)]
        self_managed: SelfManagedFlags,
    }

    fn parse(args: &[&str]) -> Result<Flags, clap::Error> {
        Flags::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
    }

    #[test]
    fn exactly_one_way_to_the_certificate() {
        let files = parse(&["--tls-cert-file=c", "--tls-private-key-file=k"]).expect("files");
        assert_eq!(files.self_managed.options(), None);
        let managed = parse(&["--self-managed-certificates"]).expect("self-managed");
        assert_eq!(
            managed.self_managed.options(),
            Some(Options {
                secret: ObjectName { namespace: "kube-system".into(), name: "edge-health-admission-tls".into() },
                webhook_configuration: "edge-health-admission".into(),
                names: [
                    "edge-health-admission.kube-system.svc".to_string(),
                    "edge-health-admission.kube-system.svc.cluster.local".to_string()
                ]
                .into(),
                validity: Duration::from_secs(8760 * 3600),
                ca_validity: Duration::from_secs(87600 * 3600),
                check_period: Duration::from_secs(60),
            })
        );
        let neither = parse(&[]).expect_err("one way is required");
        assert_eq!(neither.kind(), clap::error::ErrorKind::MissingRequiredArgument, "{neither}");
        for both in [
            &["--self-managed-certificates", "--tls-cert-file=c", "--tls-private-key-file=k"][..],
            &["--self-managed-certificates", "--tls-private-key-file=k"][..],
        ] {
            let error = parse(both).expect_err("not both");
            assert!(
                matches!(
                    error.kind(),
                    clap::error::ErrorKind::ArgumentConflict | clap::error::ErrorKind::MissingRequiredArgument
                ),
                "{both:?}: {error}"
            );
        }
        let stray = parse(&["--tls-cert-file=c", "--tls-private-key-file=k", "--certificate-secret=a/b"])
            .expect_err("self-managed flags are not for files");
        assert_eq!(stray.kind(), clap::error::ErrorKind::ArgumentConflict, "{stray}");
        let alone = parse(&["--certificate-validity=1h"]).expect_err("self-managed flags need the mode");
        assert_eq!(alone.kind(), clap::error::ErrorKind::MissingRequiredArgument, "{alone}");
        assert!(alone.to_string().contains("--self-managed-certificates"), "{alone}");
    }

    #[test]
    fn the_mode_s_settings() {
        let flags = parse(&[
            "--self-managed-certificates",
            "--certificate-secret=edge/tls",
            "--webhook-configuration-name=hooks",
            "--service=edge/admission",
            "--extra-san=127.0.0.1,Webhook.Example.com",
            "--extra-san=::1",
            "--certificate-validity=6s",
            "--certificate-check-period=500ms",
        ])
        .expect("parses");
        let options = flags.self_managed.options().expect("on");
        assert_eq!(options.secret.to_string(), "edge/tls");
        assert_eq!(options.webhook_configuration, "hooks");
        assert_eq!(
            options.names.iter().map(String::as_str).collect::<Vec<_>>(),
            ["127.0.0.1", "::1", "admission.edge.svc", "admission.edge.svc.cluster.local", "webhook.example.com"]
        );
        assert_eq!((options.validity, options.check_period), (Duration::from_secs(6), Duration::from_millis(500)));
        for bad in [
            "--certificate-secret=no-slash",
            "--certificate-secret=/name",
            "--service=a/b/c",
            "--extra-san=not a name",
            "--certificate-validity=2s",
            "--certificate-validity=87601h",
            "--certificate-check-period=10ms",
        ] {
            let error = parse(&["--self-managed-certificates", bad]).expect_err(bad);
            assert_eq!(error.kind(), clap::error::ErrorKind::ValueValidation, "{bad}: {error}");
        }
    }
}
