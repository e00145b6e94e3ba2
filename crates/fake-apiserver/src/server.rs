//! The HTTP face of the store: Kubernetes REST paths, discovery, list/watch.
//!
//! One fallback handler parses every resource path itself, because Kubernetes paths
//! (`/api/v1/namespaces/{ns}/...` vs `/api/v1/namespaces/{name}/status`) are resolved
//! against the set of registered resources, which changes when CRDs are created.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use listwatch::{ListOptions, Representation, Shape, WatchConfig, WatchOptions};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::admission;
use crate::admission_request::{self, Operation};
use crate::builtin_types::{WithType, with_type};
use crate::error::ApiError;
use crate::events;
use crate::faults::{Fault, Faults};
use crate::field_manager::Writer;
use crate::pod_proxy;
use crate::resources::ResourceType;
use crate::schema::{self, FieldValidation};
use crate::store::{DeleteOptions, Ownership, PatchKind, Patched, Store};
use crate::table;
use crate::users::UserInfo;

/// Tunables of one server instance.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Changes kept for watch resumption and list snapshots.
    pub history_limit: usize,
    /// Changes buffered per watcher before a slow watcher is cut off with 410.
    pub watch_buffer: usize,
    /// How often watchers that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// Requests with a larger body are refused (the real server's limit is 3 MiB).
    pub max_body_bytes: usize,
    /// `timeoutSeconds` used when a watch gives none.
    pub default_watch_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            history_limit: 10_000,
            watch_buffer: 10_000,
            bookmark_interval: Duration::from_secs(5),
            max_body_bytes: 3 * 1024 * 1024,
            default_watch_timeout: Duration::from_secs(1800),
        }
    }
}

pub struct App {
    pub store: Arc<Store>,
    pub config: ServerConfig,
    pub faults: Faults,
    /// Bumped to cut every open watch (fault injection).
    pub watch_generation: watch::Sender<u64>,
    /// Every answered request, for tests that count what a client did.
    pub requests: crate::requests::RequestLog,
    /// The identities of registered bearer tokens.
    pub users: crate::users::Users,
}

pub fn router(app: Arc<App>) -> Router {
    Router::new().fallback(dispatch).with_state(app)
}

fn json_response(code: StatusCode, value: &Value) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], value.to_string()).into_response()
}

fn ok(value: &Value) -> Response {
    json_response(StatusCode::OK, value)
}

/// A parsed resource path.
struct Target {
    rt: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
    /// The `/scale` subresource.
    scale: bool,
}

async fn dispatch(
    State(app): State<Arc<App>>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let user = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    let caller = app.users.authenticate(user);
    let response = match handle(&app, &method, &uri, &query, &headers, body, &caller).await {
        Ok(response) => response,
        Err(e) => {
            tracing::debug!(%method, %uri, code = e.code(), error = %e, "request failed");
            e.into_response()
        }
    };
    let impersonating = headers.get("impersonate-user").and_then(|value| value.to_str().ok());
    let (path, query, status) = (uri.path(), uri.query().unwrap_or_default(), response.status().as_u16());
    app.requests.record_as(method.as_str(), path, query, status, user, impersonating);
    response
}

async fn handle(
    app: &Arc<App>,
    method: &Method,
    uri: &Uri,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Body,
    user: &UserInfo,
) -> Result<Response, ApiError> {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    if segments.first() == Some(&CONTROL_PREFIX) {
        return control(app, method, &segments[1..], body).await;
    }
    if method == Method::GET
        && let Some(response) = discovery(app, &segments)
    {
        return Ok(response);
    }
    if let Some(proxied) = pod_proxy::target(&segments) {
        let pods = resolve(&app.store, &["api", "v1", "pods"])?;
        return pod_proxy::proxy(&app.store, &pods.rt, method, proxied, uri.query()).await;
    }
    if let Some((namespace, name)) = crate::token_request::target(&segments) {
        if method != Method::POST {
            return Err(ApiError::MethodNotAllowed);
        }
        app.faults.apply("serviceaccounts").await?;
        let body = axum::body::to_bytes(body, app.config.max_body_bytes)
            .await
            .map_err(|_| ApiError::TooLarge { limit: app.config.max_body_bytes })?;
        // validating policies see the TokenRequest as a CREATE of `serviceaccounts/token`,
        // before anything is checked or defaulted (the real server's `createValidation`)
        let object: Value = serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let accounts = resolve(&app.store, &["api", "v1", "serviceaccounts"])?;
        let request = admission_request::Request {
            rt: &accounts.rt,
            operation: Operation::Create,
            namespace,
            name,
            subresource: Some("token"),
            object,
            old: None,
            user,
        };
        admission::admit_validating(&app.store, &request)?;
        let issued = crate::token_request::create(&app.store, &app.users, namespace, name, &body)?;
        return Ok(json_response(StatusCode::CREATED, &issued));
    }
    let target = resolve(&app.store, &segments)?;
    app.faults.apply(&target.rt.plural).await?;
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if content_type.starts_with("application/vnd.kubernetes.protobuf") {
        return Err(ApiError::UnsupportedMediaType(
            "protobuf request bodies are not supported by this in-repo API server: send JSON \
             (kubectl's create generators send protobuf: `kubectl create ... --dry-run=client -o yaml | kubectl apply -f -`)"
                .into(),
        ));
    }
    let body = axum::body::to_bytes(body, app.config.max_body_bytes)
        .await
        .map_err(|_| ApiError::TooLarge { limit: app.config.max_body_bytes })?;
    let store = &app.store;
    let rt = &target.rt;
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let shape = Shape::from_accept(accept);
    let as_table = table::wants_table(accept);
    let validation = FieldValidation::from_query(query.get("fieldValidation").map(String::as_str))?;
    // who writes, for field ownership: `?fieldManager=`, else the User-Agent's first word
    let sent_manager = query.get("fieldManager").filter(|m| !m.is_empty());
    let user_agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let manager = sent_manager.cloned().unwrap_or_else(|| manager_from_user_agent(user_agent));
    let (api_version, now) = (rt.api_version(), crate::store::now());
    let subresource = if target.status { Some("status") } else { target.scale.then_some("scale") };
    let writer = Writer { manager: &manager, api_version: &api_version, subresource, now: &now };
    if target.scale {
        return scale(store, &target, method, headers, &body, &writer).map(|s| ok(&s));
    }
    match (method.clone(), &target.name) {
        (Method::GET, None) if listwatch::is_watch(query) => watch(app, &target, query, shape),
        (Method::GET, None) if as_table => list_table(store, &target, query),
        (Method::GET, None) => list(store, &target, query, shape),
        (Method::GET, Some(name)) if as_table => {
            let object = store.get(rt, namespace, name)?;
            Ok(ok(&table::table(rt, &[object], store.current_rv(), None, jiff::Timestamp::now().as_second())))
        }
        (Method::GET, Some(name)) => Ok(ok(&shape.present(store.get(rt, namespace, name)?))),
        (Method::POST, None) => {
            let object = parse_json(&body)?;
            let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let request = admission_request::Request {
                rt,
                operation: Operation::Create,
                namespace,
                name: &name,
                subresource: None,
                object,
                old: None,
                user,
            };
            let mut admitted = admission::admit(store, request).await?;
            let warnings = schema::check(rt, &mut admitted, validation)?;
            let created = store.create_owned(rt, namespace, admitted, Ownership::Update(&writer))?;
            events::mirror(store, rt, &created);
            Ok(warned(json_response(StatusCode::CREATED, &created), &warnings))
        }
        (Method::PUT, Some(name)) => {
            let old = store.get(rt, namespace, name)?;
            let request = admission_request::Request {
                rt,
                operation: Operation::Update,
                namespace,
                name,
                subresource: target.status.then_some("status"),
                object: parse_json(&body)?,
                old: Some(&old),
                user,
            };
            let mut admitted = admission::admit(store, request).await?;
            let warnings = schema::check(rt, &mut admitted, validation)?;
            let updated =
                store.update_owned(rt, namespace, name, admitted, target.status, Ownership::Update(&writer))?;
            events::mirror(store, rt, &updated);
            Ok(warned(ok(&updated), &warnings))
        }
        (Method::PATCH, Some(name)) => {
            let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
            let kind = match content_type.split(';').next().unwrap_or_default().trim() {
                "application/json-patch+json" => PatchKind::Json,
                "application/merge-patch+json" => PatchKind::Merge,
                "application/strategic-merge-patch+json" => PatchKind::Strategic,
                "application/apply-patch+yaml" | "application/apply-patch+json" => PatchKind::Apply,
                other => {
                    return Err(ApiError::UnsupportedMediaType(format!(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {other:?})"
                    )));
                }
            };
            let force = query.get("force").is_some_and(|f| f == "true");
            let applier = sent_manager.map(|_| (&writer, force));
            let (patched, warnings) =
                patch_with_admission(store, &target, name, (kind, &writer, applier), &body, validation, user).await?;
            events::mirror(store, rt, &patched);
            Ok(warned(ok(&patched), &warnings))
        }
        (Method::DELETE, None) => {
            let deleted = store.delete_collection(
                rt,
                &ListOptions::from_query(query, target.namespace.clone())?,
                &delete_options(&body, query)?,
            )?;
            for item in &deleted {
                events::mirror_delete(store, rt, item);
            }
            Ok(ok(&json!({
                "kind": format!("{}List", rt.kind),
                "apiVersion": rt.api_version(),
                "metadata": {"resourceVersion": store.current_rv().to_string()},
                "items": deleted,
            })))
        }
        (Method::DELETE, Some(name)) if !target.status => {
            let opts = delete_options(&body, query)?;
            let old = store.get(rt, namespace, name)?;
            let request = admission_request::Request {
                rt,
                operation: Operation::Delete,
                namespace,
                name,
                subresource: None,
                object: Value::Null,
                old: Some(&old),
                user,
            };
            admission::admit_validating(store, &request)?;
            let deleted = store.delete(rt, namespace, name, &opts)?;
            events::mirror_delete(store, rt, &deleted);
            Ok(ok(&deleted))
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}

/// Reserved path of the fault-injection endpoints (used only by tests and the local cluster).
pub const CONTROL_PREFIX: &str = "fake-apiserver";

async fn control(app: &App, method: &Method, segments: &[&str], body: Body) -> Result<Response, ApiError> {
    match (method.clone(), segments) {
        (Method::GET, ["faults"]) => Ok(ok(&serde_json::to_value(app.faults.list()).unwrap_or_default())),
        (Method::PUT, ["faults", resource]) => {
            let body =
                axum::body::to_bytes(body, 64 * 1024).await.map_err(|_| ApiError::TooLarge { limit: 64 * 1024 })?;
            let fault: Fault = serde_json::from_slice(&body).map_err(|e| {
                ApiError::BadRequest(format!(r#"a fault is {{"error":503}}, "hang" or {{"latencyMs":200}}: {e}"#))
            })?;
            app.faults.set(resource, fault);
            Ok(ok(&serde_json::to_value(app.faults.list()).unwrap_or_default()))
        }
        (Method::DELETE, ["faults"]) => {
            app.faults.clear();
            Ok(ok(&json!({})))
        }
        (Method::POST, ["compact"]) => {
            app.store.compact_history();
            Ok(ok(&json!({"compactedTo": app.store.current_rv().to_string()})))
        }
        (Method::POST, ["drop-watches"]) => {
            app.watch_generation.send_modify(|g| *g += 1);
            Ok(ok(&json!({})))
        }
        _ => Err(ApiError::NoSuchResource),
    }
}

/// Conflicts between computing a patch and writing it are retried, as the real server's
/// update loop does; admission runs in between, outside the store lock.
const PATCH_ATTEMPTS: usize = 5;

async fn patch_with_admission(
    store: &Store,
    target: &Target,
    name: &str,
    (kind, writer, applier): (PatchKind, &Writer<'_>, Option<(&Writer<'_>, bool)>),
    body: &Bytes,
    validation: FieldValidation,
    user: &UserInfo,
) -> Result<(Value, Vec<String>), ApiError> {
    let (rt, namespace) = (&target.rt, target.namespace.as_deref().unwrap_or_default());
    // an apply records its ownership while merging; any other patch is an update
    let ownership = match kind {
        PatchKind::Apply => Ownership::Applied,
        _ => Ownership::Update(writer),
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let prepared = store.prepare_patch(rt, namespace, name, kind, body, target.status, applier)?;
        let (operation, object, old) = match prepared {
            Patched::Create(object) => (Operation::Create, object, None),
            Patched::Update { old, new } => (Operation::Update, new, Some(old)),
        };
        let request = admission_request::Request {
            rt,
            operation,
            namespace,
            name,
            subresource: target.status.then_some("status"),
            object,
            old: old.as_ref(),
            user,
        };
        let mut admitted = admission::admit(store, request).await?;
        let warnings = schema::check(rt, &mut admitted, validation)?;
        let written = match &old {
            None => store.create_owned(rt, namespace, admitted, ownership),
            Some(old) => store.replace_if_unchanged(rt, namespace, name, old, admitted, target.status, ownership),
        };
        match written {
            Err(ApiError::Conflict { .. } | ApiError::AlreadyExists { .. }) if attempt < PATCH_ATTEMPTS => continue,
            other => return other.map(|written| (written, warnings)),
        }
    }
}

/// The field manager a write without `?fieldManager=` is recorded under, as the real
/// server names it: the User-Agent up to its first `/` (`kubectl`, `kube-rs`).
fn manager_from_user_agent(user_agent: &str) -> String {
    let manager = user_agent.split('/').next().unwrap_or_default().trim();
    if manager.is_empty() { "unknown".to_string() } else { manager.to_string() }
}

fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("the request body is not valid JSON: {e}")))
}

fn delete_options(body: &Bytes, query: &HashMap<String, String>) -> Result<DeleteOptions, ApiError> {
    let options: Value = if body.is_empty() { json!({}) } else { parse_json(body)? };
    let policy = options["propagationPolicy"].as_str().or(query.get("propagationPolicy").map(String::as_str));
    Ok(DeleteOptions {
        uid: options["preconditions"]["uid"].as_str().map(str::to_string),
        resource_version: options["preconditions"]["resourceVersion"].as_str().map(str::to_string),
        orphan: policy == Some("Orphan") || options["orphanDependents"].as_bool() == Some(true),
    })
}

fn resolve(store: &Store, segments: &[&str]) -> Result<Target, ApiError> {
    let (group, version, rest) = match segments {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::NoSuchResource),
    };
    let lookup = |plural: &str| store.resolve(group, version, plural);
    // `/namespaces/{ns}/{resource}/...` when {resource} is a namespaced resource;
    // otherwise `/namespaces/{name}[/status]` addresses the Namespace itself.
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..] if lookup(plural).is_some_and(|rt| rt.namespaced) => {
            (Some(ns.to_string()), [&[*plural][..], tail].concat())
        }
        _ => (None, rest.to_vec()),
    };
    let (rt, name, status, scale) = match rest.as_slice() {
        [plural] => (lookup(plural), None, false, false),
        [plural, name] => (lookup(plural), Some(name.to_string()), false, false),
        [plural, name, "status"] => {
            (lookup(plural).filter(|rt| rt.status_subresource), Some(name.to_string()), true, false)
        }
        [plural, name, "scale"] => {
            (lookup(plural).filter(|rt| rt.scale_subresource), Some(name.to_string()), false, true)
        }
        _ => (None, None, false, false),
    };
    let rt = rt.ok_or(ApiError::NoSuchResource)?;
    if rt.namespaced && namespace.is_none() && name.is_some() {
        return Err(ApiError::NoSuchResource);
    }
    Ok(Target { rt, namespace, name, status, scale })
}

fn list(store: &Store, target: &Target, query: &HashMap<String, String>, shape: Shape) -> Result<Response, ApiError> {
    let opts = ListOptions::from_query(query, target.namespace.clone())?;
    let page = store.list_encoded(&target.rt, &opts)?;
    let chunks = listwatch::ListBody::new(page, Representation::json(target.rt.served(), shape))
        .map(Ok::<_, std::convert::Infallible>);
    let body = axum::body::Body::from_stream(futures::stream::iter(chunks));
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// `/scale` of a Deployment or StatefulSet: its `spec.replicas` as an `autoscaling/v1`
/// Scale, read, replaced or patched (what `kubectl scale` does).
fn scale(
    store: &Store,
    target: &Target,
    method: &Method,
    headers: &HeaderMap,
    body: &Bytes,
    writer: &Writer<'_>,
) -> Result<Value, ApiError> {
    let (rt, namespace) = (&target.rt, target.namespace.as_deref().unwrap_or_default());
    let name = target.name.as_deref().unwrap_or_default();
    let object = store.get(rt, namespace, name)?;
    let current = scale_of(&object);
    let wanted = match *method {
        Method::GET => return Ok(current),
        Method::PUT => parse_json(body)?,
        Method::PATCH => {
            let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
            let mut scale = current.clone();
            match content_type.split(';').next().unwrap_or_default().trim() {
                "application/json-patch+json" => {
                    let ops: json_patch::Patch = serde_json::from_slice(body)
                        .map_err(|e| ApiError::BadRequest(format!("the JSON patch is not valid: {e}")))?;
                    json_patch::patch(&mut scale, &ops).map_err(|e| ApiError::BadRequest(e.to_string()))?;
                }
                // a Scale has no lists: strategic merge is a merge
                "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                    json_patch::merge(&mut scale, &parse_json(body)?);
                }
                other => {
                    return Err(ApiError::UnsupportedMediaType(format!(
                        "the scale subresource takes JSON, merge and strategic merge patches (got {other:?})"
                    )));
                }
            }
            scale
        }
        _ => return Err(ApiError::MethodNotAllowed),
    };
    let Some(replicas) = wanted["spec"]["replicas"].as_i64().filter(|r| *r >= 0) else {
        return Err(ApiError::BadRequest("spec.replicas of a Scale must be a non-negative integer".into()));
    };
    let mut updated = object;
    updated["spec"]["replicas"] = json!(replicas);
    // a Scale's resourceVersion is its object's: a stale one conflicts as on the object
    if let Some(rv) = wanted["metadata"]["resourceVersion"].as_str().filter(|rv| !rv.is_empty()) {
        updated["metadata"]["resourceVersion"] = json!(rv);
    }
    let written = store.update_owned(rt, namespace, name, updated, false, Ownership::Update(writer))?;
    Ok(scale_of(&written))
}

/// The `autoscaling/v1` Scale of a Deployment or StatefulSet.
fn scale_of(object: &Value) -> Value {
    let metadata = &object["metadata"];
    let selector = object["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|labels| {
            labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect::<Vec<_>>().join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"], "uid": metadata["uid"],
            "resourceVersion": metadata["resourceVersion"], "creationTimestamp": metadata["creationTimestamp"]},
        "spec": {"replicas": object["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {"replicas": object["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector},
    })
}

/// `response` with one `Warning` header per warning, as the real server sends them.
fn warned(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!("299 - {}", serde_json::to_string(warning).unwrap_or_default());
        if let Ok(value) = axum::http::HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

/// A list page as a Table (what `kubectl get` asks for).
fn list_table(store: &Store, target: &Target, query: &HashMap<String, String>) -> Result<Response, ApiError> {
    let opts = ListOptions::from_query(query, target.namespace.clone())?;
    let page = store.list_encoded(&target.rt, &opts)?;
    let objects: Vec<Value> = page.items.iter().map(|item| item.value()).collect();
    let now = jiff::Timestamp::now().as_second();
    Ok(ok(&table::table(&target.rt, &objects, page.rv, page.continue_token.as_deref(), now)))
}

fn watch(app: &Arc<App>, target: &Target, query: &HashMap<String, String>, shape: Shape) -> Result<Response, ApiError> {
    let opts = WatchOptions::from_query(query, target.namespace.clone())?;
    let start = app.store.watch(&target.rt, &opts);
    let mut kill = app.watch_generation.subscribe();
    let config = WatchConfig {
        bookmark_interval: app.config.bookmark_interval,
        default_timeout: app.config.default_watch_timeout,
    };
    let stop = async move {
        let _ = kill.changed().await;
    };
    let events = listwatch::watch_stream(start, opts, Representation::json(target.rt.served(), shape), config, stop);
    Ok(([(header::CONTENT_TYPE, "application/json")], Body::from_stream(events.map(Ok::<_, Infallible>)))
        .into_response())
}

fn discovery(app: &App, segments: &[&str]) -> Option<Response> {
    let types = app.store.types();
    let groups = || {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for t in types.iter().filter(|t| !t.group.is_empty()) {
            match groups.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, versions)) if !versions.contains(&t.version) => versions.push(t.version.clone()),
                Some(_) => {}
                None => groups.push((t.group.clone(), vec![t.version.clone()])),
            }
        }
        groups
    };
    let group_json = |name: &str, versions: &[String]| {
        let entries: Vec<Value> =
            versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect();
        json!({"name": name, "versions": entries, "preferredVersion": entries[0]})
    };
    let resource_list = |group: &str, version: &str| {
        let resources: Vec<Value> = types
            .iter()
            .filter(|t| t.group == group && t.version == version)
            .flat_map(ResourceType::discovery_entries)
            .collect();
        let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
        (!resources.is_empty()).then(|| {
            ok(&json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}))
        })
    };
    match segments {
        ["version"] => Some(ok(&json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-fake", "gitCommit": "fake",
            "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "none",
            "compiler": "rustc", "platform": "linux/amd64",
        }))),
        ["healthz" | "readyz" | "livez"] => Some((StatusCode::OK, "ok").into_response()),
        ["api"] => Some(ok(&json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}))),
        ["api", version] => resource_list("", version),
        ["apis"] => Some(ok(&json!({
            "kind": "APIGroupList", "apiVersion": "v1",
            "groups": groups().iter().map(|(g, v)| group_json(g, v)).collect::<Vec<_>>(),
        }))),
        ["apis", group] => groups().iter().find(|(g, _)| g == group).map(|(g, v)| {
            let mut body = group_json(g, v);
            body["kind"] = json!("APIGroup");
            body["apiVersion"] = json!("v1");
            ok(&body)
        }),
        ["apis", group, version] => resource_list(group, version),
        ["openapi", "v3"] => Some(ok(&openapi_index(&types))),
        ["openapi", "v3", "api", version] => Some(ok(&openapi_group_version(&types, "", version))),
        ["openapi", "v3", "apis", group, version] => Some(ok(&openapi_group_version(&types, group, version))),
        _ => None,
    }
}

/// `/openapi/v3`: one entry per group-version, as the real server lists them.
fn openapi_index(types: &[ResourceType]) -> Value {
    let mut paths = serde_json::Map::new();
    for t in types {
        let path =
            if t.group.is_empty() { format!("api/{}", t.version) } else { format!("apis/{}/{}", t.group, t.version) };
        paths.insert(path.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash=fake")}));
    }
    json!({"paths": paths})
}

/// The OpenAPI v3 document of one group-version, reduced to what clients probe: each
/// resource's PATCH operation, tagged with its kind and declaring the `fieldValidation`
/// query parameter, so kubectl uses server-side field validation, and the schemas
/// `kubectl explain` reads: the custom resources' and those of the built-in kinds users
/// look at here.
fn openapi_group_version(types: &[ResourceType], group: &str, version: &str) -> Value {
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for t in types.iter().filter(|t| t.group == group && t.version == version) {
        let prefix = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
        let scope = if t.namespaced { "/namespaces/{namespace}" } else { "" };
        let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
        let patch = json!({
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}}],
            "responses": {"200": {"description": "OK"}},
        });
        paths.insert(format!("{prefix}{scope}/{}/{{name}}", t.plural), json!({"patch": patch}));
        if let Some(schema) = &t.schema {
            schemas.insert(schema_name(t), published_schema(t, schema));
        }
        builtin_schemas(t, &mut schemas);
    }
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.33.0-fake"}, "paths": paths,
        "components": {"schemas": schemas}})
}

/// A built-in kind's schema and those it refers to, from k8s-openapi's (named as the real
/// server names them, `io.k8s.api.apps.v1.Deployment`), tagged with the kind it describes.
fn builtin_schemas(t: &ResourceType, schemas: &mut serde_json::Map<String, Value>) {
    struct Publish<'a>(&'a ResourceType);
    impl WithType for Publish<'_> {
        type Out = serde_json::Map<String, Value>;
        fn with<T: serde::de::DeserializeOwned + schemars::JsonSchema>(self) -> Self::Out {
            let t = self.0;
            let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
            let _ = generator.subschema_for::<T>();
            let mut definitions = generator.take_definitions(true);
            if let Some(top) = definitions.get_mut(T::schema_name().as_ref()).and_then(Value::as_object_mut) {
                top.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": t.group, "version": t.version, "kind": t.kind}]),
                );
            }
            definitions
        }
    }
    schemas.extend(with_type(t, Publish(t)).unwrap_or_default());
}

/// `io.superedge.v1.DeploymentGrid`: the group reversed, as a real server names a custom
/// resource's schema.
fn schema_name(t: &ResourceType) -> String {
    let group: Vec<&str> = t.group.split('.').rev().collect();
    format!("{}.{}.{}", group.join("."), t.version, t.kind)
}

/// A CRD version's schema as a real server publishes it (for `kubectl explain`): with
/// `apiVersion`, `kind` and `metadata` added and the kind it describes.
fn published_schema(t: &ResourceType, schema: &Value) -> Value {
    let mut schema = schema.clone();
    let common = [
        (
            "apiVersion",
            "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values.",
            "string",
        ),
        (
            "kind",
            "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase.",
            "string",
        ),
        ("metadata", "Standard object's metadata.", "object"),
    ];
    if let Some(object) = schema.as_object_mut() {
        let properties = object.entry("properties").or_insert_with(|| json!({}));
        for (name, description, kind) in common {
            properties[name] = json!({"description": description, "type": kind});
        }
        object.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": t.group, "version": t.version, "kind": t.kind}]),
        );
    }
    schema
}
