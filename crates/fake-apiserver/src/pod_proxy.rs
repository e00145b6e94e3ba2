//! `GET /api/v1/namespaces/{ns}/pods/{name}[:port]/proxy/{path}`: the pod proxy, as far as
//! reading a pod's HTTP endpoint goes (what `kubectl get --raw` and diagnostics tools
//! use): the request is sent to the pod's `status.podIP` on that port (80 without one),
//! plain HTTP, and the pod's answer is returned with its status and content type. Other
//! methods, `https:` name prefixes and streaming upgrades are not supported (405/400).

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use crate::error::ApiError;
use crate::resources::ResourceType;
use crate::store::Store;

/// How long the pod has to answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer passed on.
const LIMIT: usize = 16 * 1024 * 1024;

/// `(namespace, pod, port, path)` when `segments` address the pod proxy.
pub fn target<'a>(segments: &[&'a str]) -> Option<(&'a str, &'a str, Option<&'a str>, String)> {
    match segments {
        ["api", "v1", "namespaces", namespace, "pods", pod, "proxy", rest @ ..] => {
            let (name, port) = match pod.split_once(':') {
                Some((name, port)) => (name, Some(port)),
                None => (*pod, None),
            };
            Some((namespace, name, port, format!("/{}", rest.join("/"))))
        }
        _ => None,
    }
}

pub async fn proxy(
    store: &Store,
    pods: &ResourceType,
    method: &Method,
    (namespace, name, port, path): (&str, &str, Option<&str>, String),
    query: Option<&str>,
) -> Result<Response, ApiError> {
    if method != Method::GET {
        // this server's pod proxy only forwards GET
        return Err(ApiError::MethodNotAllowed);
    }
    let port: u16 = match port {
        None => 80,
        Some(port) => port.parse().map_err(|_| {
            ApiError::BadRequest(format!(
                "pod proxy port {port:?} is not a port number (named ports and schemes are not supported here)"
            ))
        })?,
    };
    let pod = store.get(pods, namespace, name)?;
    let Some(ip) = pod["status"]["podIP"].as_str().filter(|ip| !ip.is_empty()) else {
        return Err(ApiError::Unavailable(format!("pod {namespace}/{name} has no IP (status.podIP) to proxy to")));
    };
    let target = match query {
        Some(query) if !query.is_empty() => format!("{path}?{query}"),
        _ => path,
    };
    let unreachable =
        |reason: String| ApiError::Unavailable(format!("error trying to reach pod {name} on {ip}:{port}: {reason}"));
    let exchange = async {
        let stream = tokio::net::TcpStream::connect((ip, port)).await.map_err(|e| unreachable(e.to_string()))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        tokio::spawn(connection);
        let request = hyper::Request::get(target.as_str())
            .header(header::HOST, format!("{ip}:{port}"))
            .body(Empty::<Bytes>::new())
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let response = sender.send_request(request).await.map_err(|e| unreachable(e.to_string()))?;
        let status = response.status();
        let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
        let body = http_body_util::Limited::new(response.into_body(), LIMIT)
            .collect()
            .await
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        Ok::<_, ApiError>((status, content_type, body))
    };
    let (status, content_type, body) =
        tokio::time::timeout(TIMEOUT, exchange).await.map_err(|_| unreachable("timed out".into()))??;
    let mut response =
        (StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY), Body::from(body)).into_response();
    if let Some(content_type) = content_type {
        response.headers_mut().insert(header::CONTENT_TYPE, content_type);
    } else {
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_paths_name_the_pod_the_port_and_the_path() {
        let segments = |path: &str| path.split('/').filter(|s| !s.is_empty()).map(str::to_string).collect::<Vec<_>>();
        let parse = |path: &str| {
            let owned = segments(path);
            let borrowed: Vec<&str> = owned.iter().map(String::as_str).collect();
            target(&borrowed)
                .map(|(ns, pod, port, rest)| (ns.to_string(), pod.to_string(), port.map(str::to_string), rest))
        };
        assert_eq!(
            parse("/api/v1/namespaces/kube-system/pods/w-1:51007/proxy/debug/topology"),
            Some(("kube-system".into(), "w-1".into(), Some("51007".into()), "/debug/topology".into()))
        );
        assert_eq!(parse("/api/v1/namespaces/a/pods/p/proxy"), Some(("a".into(), "p".into(), None, "/".into())));
        assert_eq!(parse("/api/v1/namespaces/a/pods/p"), None);
        assert_eq!(parse("/api/v1/namespaces/a/pods/p/status"), None);
    }
}
