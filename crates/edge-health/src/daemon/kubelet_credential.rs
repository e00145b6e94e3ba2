//! The bearer token `kind=kubelet` checks send to peer kubelets, and where it comes from.
//!
//! A peer's kubelet serving certificate can usually not be verified (kubeadm's kubelets
//! serve self-signed ones), so whoever answers at a peer's address (a node publishing
//! another's address, or one that took over its ARP or routes) receives what the check
//! sends. This module must therefore never hand out the daemon's own identity, its pod's
//! service-account token, which may patch Nodes. What it hands out is one of:
//! - a token of a ServiceAccount the chart binds to `get nodes/healthz` alone
//!   (`--kubelet-check-service-account`), asked for with the TokenRequest API, valid for
//!   10 minutes, renewed before it expires and held in memory only;
//! - a file the operator mounted (`--token-file`), their choice of credential;
//! - nothing: the check goes without, and a kubelet's 401 still shows it serving
//!   ([`crate::config::KUBELET_ALIVE_REFUSALS`]). An expired or not yet issued token is
//!   nothing too: there is no fallback to another credential.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;

use super::clock::wall_clock;
use super::metrics::{Metrics, ResultLabel};
use crate::time::Timestamp;

/// The lifetime asked for: the shortest the API server issues (its TokenRequest
/// validation refuses less than 10 minutes).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(600);
/// A token is not sent in its last seconds: a peer's clock may be ahead of this one.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// The longest wait between failed TokenRequests (the API server may be out of reach for
/// hours; a whole unit asking every second when it is back would be a burst).
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Where kubelet checks get their token.
#[derive(Clone, Debug)]
pub enum KubeletCredential {
    /// No token is sent.
    None,
    /// The operator's token file, re-read each time (it may rotate).
    File(PathBuf),
    /// Tokens of a ServiceAccount from the TokenRequest API ([`keep_requested`]).
    Requested(Arc<RequestedToken>),
}

impl KubeletCredential {
    /// The token to send now, if any.
    pub fn current(&self, now: Timestamp) -> Option<String> {
        match self {
            Self::None => None,
            Self::File(path) => match std::fs::read_to_string(path) {
                Ok(token) => Some(token.trim().to_string()).filter(|t| !t.is_empty()),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "--token-file unreadable: kubelet checks go without a token");
                    None
                }
            },
            Self::Requested(requested) => requested.current(now),
        }
    }
}

/// The latest token issued for one ServiceAccount; the token itself is never printed.
pub struct RequestedToken {
    namespace: String,
    name: String,
    issued: Mutex<Option<Issued>>,
}

struct Issued {
    token: String,
    expires: Timestamp,
}

impl std::fmt::Debug for RequestedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestedToken").field("namespace", &self.namespace).field("name", &self.name).finish()
    }
}

impl RequestedToken {
    /// `service_account`: `<namespace>/<name>`.
    pub fn parse(service_account: &str) -> Option<Self> {
        let (namespace, name) = service_account.split_once('/')?;
        let valid = |s: &str| !s.is_empty() && !s.contains('/');
        (valid(namespace) && valid(name)).then(|| Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
            issued: Mutex::new(None),
        })
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The token, unless none was issued yet or it expires within [`EXPIRY_MARGIN`].
    pub fn current(&self, now: Timestamp) -> Option<String> {
        let issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        issued.as_ref().filter(|i| now < i.expires.saturating_sub(EXPIRY_MARGIN)).map(|i| i.token.clone())
    }

    /// Holds `token` until `expires`.
    pub fn store(&self, token: String, expires: Timestamp) {
        *self.issued.lock().unwrap_or_else(|e| e.into_inner()) = Some(Issued { token, expires });
    }
}

/// What the daemon asks for: [`TOKEN_LIFETIME`], the API server's own audience (the one
/// a kubelet's TokenReview accepts), and no bound object. Not bound to this daemon's Pod:
/// the API server refuses to bind a token of one ServiceAccount to a Pod running under
/// another (kubernetes `pkg/registry/core/serviceaccount/storage/token.go`,
/// `TokenREST.Create`: "cannot bind token for serviceaccount %q to pod running with
/// different serviceaccount name."); its short lifetime stands in for the binding.
pub fn token_request() -> TokenRequest {
    TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(i64::try_from(TOKEN_LIFETIME.as_secs()).unwrap_or(600)),
            bound_object_ref: None,
        },
        ..TokenRequest::default()
    }
}

/// When to renew a token issued at `issued` that expires at `expires`: after 80% of its
/// lifetime, as the kubelet renews projected tokens, and not before a second has passed.
pub fn renew_after(issued: Timestamp, expires: Timestamp) -> Duration {
    let lifetime = if expires > issued { expires.distance(issued) } else { Duration::ZERO };
    lifetime.mul_f64(0.8).max(Duration::from_secs(1))
}

/// The wait after `failures` (at least 1) failed requests in a row: 1 s, doubling, at most
/// [`MAX_RETRY`].
pub fn retry_after(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(6)).min(MAX_RETRY)
}

/// Why no token was issued.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("the TokenRequest came back without a status")]
    NoStatus,
}

/// Asks for one token and holds it; how long until the next request.
pub async fn request_once(api: &Api<ServiceAccount>, token: &RequestedToken) -> Result<Duration, TokenError> {
    let asked = wall_clock();
    let issued = api.create_token_request(&token.name, &PostParams::default(), &token_request()).await?;
    let status = issued.status.ok_or(TokenError::NoStatus)?;
    let expires_millis = u64::try_from(status.expiration_timestamp.0.as_millisecond()).unwrap_or(0);
    let expires = Timestamp::from_unix_millis(expires_millis);
    token.store(status.token, expires);
    Ok(renew_after(asked, expires))
}

/// Keeps `token` current for as long as it runs: asks at once, renews after 80% of each
/// token's lifetime, retries failures with backoff (meanwhile the held token is used until
/// it expires, then none).
pub async fn keep_requested(api: Api<ServiceAccount>, token: Arc<RequestedToken>, metrics: &Metrics) {
    let mut failures = 0u32;
    loop {
        let wait = match request_once(&api, &token).await {
            Ok(renew) => {
                failures = 0;
                metrics.kubelet_check_tokens.get_or_create(&ResultLabel { result: "issued" }).inc();
                tracing::debug!(service_account = %token.name, renew_in = ?renew, "kubelet-check token issued");
                renew
            }
            Err(error) => {
                failures = failures.saturating_add(1);
                metrics.kubelet_check_tokens.get_or_create(&ResultLabel { result: "failed" }).inc();
                tracing::warn!(namespace = %token.namespace, service_account = %token.name, %error, failures,
                    "no kubelet-check token: the TokenRequest failed");
                retry_after(failures)
            }
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use fake_apiserver::FakeApiServer;

    use super::*;

    const T0: Timestamp = Timestamp::from_unix_millis(1_700_000_000_000);

    #[test]
    fn a_token_is_used_until_shortly_before_it_expires_then_none() {
        let token = RequestedToken::parse("edgegrid/edge-health-kubelet-check").unwrap();
        assert_eq!((token.namespace(), token.name()), ("edgegrid", "edge-health-kubelet-check"));
        assert_eq!(token.current(T0), None, "nothing before the first token");
        token.store("check-token".into(), T0.saturating_add(TOKEN_LIFETIME));
        assert_eq!(token.current(T0).as_deref(), Some("check-token"));
        let late = T0.saturating_add(TOKEN_LIFETIME - EXPIRY_MARGIN);
        assert_eq!(token.current(late), None, "not in its last seconds, and nothing else instead");
        assert!(!format!("{:?}", KubeletCredential::Requested(Arc::new(token))).contains("check-token"));
        for bad in ["", "name", "/name", "ns/", "ns/a/b"] {
            assert!(RequestedToken::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn renewal_and_retry_timing() {
        assert_eq!(renew_after(T0, T0.saturating_add(TOKEN_LIFETIME)), Duration::from_secs(480));
        assert_eq!(renew_after(T0, T0.saturating_add(Duration::from_secs(3600))), Duration::from_secs(2880));
        assert_eq!(renew_after(T0, T0), Duration::from_secs(1), "an already expired token: soon, not at once");
        let retries: Vec<u64> = (1..=9).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(retries, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn the_request_is_short_lived_unbound_and_for_the_default_audience() {
        let request = serde_json::to_value(token_request()).unwrap();
        assert_eq!(request["spec"], serde_json::json!({"audiences": [], "expirationSeconds": 600}));
    }

    /// Against the fake apiserver's TokenRequest: the token held is the one issued for the
    /// kubelet-check ServiceAccount, renewed after 80% of its lifetime.
    #[tokio::test]
    async fn a_requested_token_is_the_kubelet_check_service_accounts() {
        let server = FakeApiServer::start().await.unwrap();
        let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        let api: Api<ServiceAccount> = Api::namespaced(client, "default");
        let token = RequestedToken::parse("default/edge-health-kubelet-check").unwrap();
        assert!(request_once(&api, &token).await.is_err(), "no such ServiceAccount yet");
        assert_eq!(token.current(wall_clock()), None);
        let account = serde_json::json!({"metadata": {"name": "edge-health-kubelet-check"}});
        api.create(&PostParams::default(), &serde_json::from_value(account).unwrap()).await.unwrap();
        let renew = request_once(&api, &token).await.unwrap();
        assert!((Duration::from_secs(478)..=Duration::from_secs(480)).contains(&renew), "{renew:?}");
        let held = token.current(wall_clock()).expect("a token");
        assert_eq!(server.user_of(&held).username, "system:serviceaccount:default:edge-health-kubelet-check");
    }
}
