//! What a client gets, from its `Accept` header: the served type, whole objects or
//! metadata only ([`Shape`]), in JSON or Kubernetes protobuf ([`Encoding`]).
//!
//! The rules are kube-apiserver's: media ranges are taken by quality then order; the first
//! one this server can answer wins; none at all is 406 `NotAcceptable`. Protobuf is offered
//! for whole objects of the kinds that have a protobuf message (metadata-only stays JSON:
//! client-go's metadata client lists JSON right after protobuf). A missing `Accept` means
//! JSON.

use serde_json::{Value, json};

use crate::error::Error;
use crate::protobuf::{self, PROTOBUF, PROTOBUF_WATCH};
use crate::served_type::ServedType;

/// How objects are written on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encoding {
    #[default]
    Json,
    /// `application/vnd.kubernetes.protobuf`
    Protobuf,
}

/// What one request is answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Representation {
    pub served: ServedType,
    pub shape: Shape,
    pub encoding: Encoding,
}

impl Representation {
    /// JSON of `served` in `shape`, whatever the client asked.
    pub fn json(served: ServedType, shape: Shape) -> Self {
        Self { served, shape, encoding: Encoding::Json }
    }

    /// The representation `accept` asks for, or 406 when this server has none of it.
    pub fn negotiate(served: ServedType, accept: Option<&str>) -> Result<Self, Error> {
        let accept = accept.map(str::trim).filter(|a| !a.is_empty()).unwrap_or("application/json");
        let mut ranges: Vec<MediaRange<'_>> = accept.split(',').filter_map(MediaRange::parse).collect();
        // stable: equal qualities keep the client's order
        ranges.sort_by(|a, b| b.quality.total_cmp(&a.quality));
        for range in ranges.iter().filter(|r| r.quality > 0.0) {
            let metadata = range.param("as").is_some_and(|view| view.starts_with("PartialObjectMetadata"));
            let shape = if metadata { Shape::Metadata } else { Shape::Full };
            match range.essence.as_str() {
                PROTOBUF
                    if shape == Shape::Full
                        && protobuf::encode::message_for(&served.api_version, &served.kind).is_some() =>
                {
                    return Ok(Self { served, shape, encoding: Encoding::Protobuf });
                }
                "application/json" | "application/*" | "*/*" => {
                    return Ok(Self { served, shape, encoding: Encoding::Json });
                }
                _ => {}
            }
        }
        Err(Error::NotAcceptable)
    }

    /// The response's `Content-Type`.
    pub fn content_type(&self, watch: bool) -> &'static str {
        match (self.encoding, watch) {
            (Encoding::Json, _) => "application/json",
            (Encoding::Protobuf, false) => PROTOBUF,
            (Encoding::Protobuf, true) => PROTOBUF_WATCH,
        }
    }
}

/// The representation a client asked for in `Accept`: whole objects, or metadata only
/// (`as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`, what kube-rs' `metadata_watcher`
/// and client-go's metadata informers send).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Shape {
    #[default]
    Full,
    Metadata,
}

impl Shape {
    /// From the value of an `Accept` header.
    pub fn from_accept(accept: &str) -> Self {
        if accept.split(',').any(|part| part.contains("as=PartialObjectMetadata")) {
            Self::Metadata
        } else {
            Self::Full
        }
    }

    /// One object in this representation.
    pub fn present(self, object: Value) -> Value {
        match self {
            Self::Full => object,
            Self::Metadata => json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
            }),
        }
    }

    /// `kind` and `apiVersion` of a list of `served` objects in this representation.
    pub fn list_type(self, served: &ServedType) -> (String, String) {
        match self {
            Self::Full => (format!("{}List", served.kind), served.api_version.clone()),
            Self::Metadata => ("PartialObjectMetadataList".into(), "meta.k8s.io/v1".into()),
        }
    }
}

/// One entry of an `Accept` header.
struct MediaRange<'a> {
    /// `type/subtype`, lower case
    essence: String,
    params: Vec<(&'a str, &'a str)>,
    quality: f32,
}

impl<'a> MediaRange<'a> {
    fn parse(range: &'a str) -> Option<Self> {
        let mut parts = range.split(';').map(str::trim);
        let essence = parts.next().filter(|e| e.contains('/'))?.to_ascii_lowercase();
        let params: Vec<(&str, &str)> =
            parts.filter_map(|p| p.split_once('=')).map(|(k, v)| (k.trim(), v.trim())).collect();
        let quality = params.iter().find(|(k, _)| *k == "q").map_or(Some(1.0), |(_, q)| q.parse::<f32>().ok())?;
        Some(Self { essence, params, quality })
    }

    fn param(&self, name: &str) -> Option<&'a str> {
        self.params.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What was negotiated, or the refusal's HTTP code.
    type Negotiated = Result<(Shape, Encoding), u16>;

    fn negotiated(kind: (&str, &str), accept: Option<&str>) -> Negotiated {
        Representation::negotiate(ServedType::new(kind.0, kind.1), accept)
            .map(|r| (r.shape, r.encoding))
            .map_err(|e| e.code())
    }

    #[test]
    fn accept_header_selects_the_metadata_representation() {
        assert_eq!(Shape::from_accept("application/json"), Shape::Full);
        assert_eq!(
            Shape::from_accept("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"),
            Shape::Metadata
        );
    }

    #[test]
    fn accept_headers_of_real_clients_get_what_kube_apiserver_would_send() {
        use Encoding::{Json, Protobuf};
        use Shape::{Full, Metadata};
        let slice = ("discovery.k8s.io/v1", "EndpointSlice");
        let grid = ("superedge.io/v1", "ServiceGrid");
        let cases: Vec<((&str, &str), Option<&str>, Negotiated)> = vec![
            // kube-proxy (client-go with protobuf content type)
            (slice, Some("application/vnd.kubernetes.protobuf, */*"), Ok((Full, Protobuf))),
            (("v1", "Service"), Some("application/vnd.kubernetes.protobuf, */*"), Ok((Full, Protobuf))),
            (("v1", "Endpoints"), Some("application/vnd.kubernetes.protobuf"), Ok((Full, Protobuf))),
            (("v1", "Node"), Some("application/vnd.kubernetes.protobuf,application/json"), Ok((Full, Protobuf))),
            // a kind without a protobuf message: JSON when allowed, else 406
            (grid, Some("application/vnd.kubernetes.protobuf, */*"), Ok((Full, Json))),
            (grid, Some("application/vnd.kubernetes.protobuf"), Err(406)),
            // kube-rs and kubectl
            (slice, Some("application/json"), Ok((Full, Json))),
            (slice, None, Ok((Full, Json))),
            (slice, Some(""), Ok((Full, Json))),
            (slice, Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"), Ok((Full, Json))),
            // metadata-only: client-go's metadata informer, kube-rs' metadata_watcher
            (
                slice,
                Some(
                    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,\
                     application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
                ),
                Ok((Metadata, Json)),
            ),
            (slice, Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"), Ok((Metadata, Json))),
            (
                slice,
                Some("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
                Err(406),
            ),
            // qualities, case, what nobody serves
            (slice, Some("application/json;q=0.5, application/vnd.kubernetes.protobuf"), Ok((Full, Protobuf))),
            (slice, Some("application/vnd.kubernetes.protobuf;q=0.1, application/json"), Ok((Full, Json))),
            (slice, Some("application/vnd.kubernetes.protobuf;q=0, application/json;q=0.2"), Ok((Full, Json))),
            (slice, Some("Application/JSON"), Ok((Full, Json))),
            (slice, Some("application/yaml"), Err(406)),
            (slice, Some("application/json;q=x"), Err(406)),
            (slice, Some("text/plain, application/*"), Ok((Full, Json))),
        ];
        for (kind, accept, want) in cases {
            assert_eq!(negotiated(kind, accept), want, "{kind:?} {accept:?}");
        }
    }

    #[test]
    fn content_types_name_the_watch_stream() {
        let protobuf = Representation {
            served: ServedType::new("v1", "Service"),
            shape: Shape::Full,
            encoding: Encoding::Protobuf,
        };
        assert_eq!(protobuf.content_type(false), "application/vnd.kubernetes.protobuf");
        assert_eq!(protobuf.content_type(true), "application/vnd.kubernetes.protobuf;stream=watch");
        assert_eq!(Representation::json(protobuf.served.clone(), Shape::Full).content_type(true), "application/json");
    }
}
