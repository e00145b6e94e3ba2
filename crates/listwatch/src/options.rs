//! List and watch parameters, parsed from a request's query as kube-apiserver parses
//! them (malformed values are 400, contradictory streaming-list options 422). Parsing
//! only: this module never looks at stored state.

use std::collections::HashMap;
use std::time::Duration;

use crate::error::Error;
use crate::selectors::{FieldSelector, LabelSelector};

/// What a list asks for.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// `None` lists every namespace.
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    /// `resourceVersion`: `None` = most recent, `Some(0)` = any (served whole, limit ignored).
    pub resource_version: Option<u64>,
    /// `resourceVersionMatch=Exact`: the snapshot at `resource_version`.
    pub exact: bool,
}

/// What a watch asks for.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// `resourceVersion`: `None` or `Some(0)` start from current state, `N` resumes after N.
    pub resource_version: Option<u64>,
    pub allow_bookmarks: bool,
    /// `sendInitialEvents=true` (a streaming list): current state as ADDED events, then
    /// the `k8s.io/initial-events-end` bookmark.
    pub send_initial_events: bool,
    /// `timeoutSeconds`; `None` leaves it to the server's default.
    pub timeout: Option<Duration>,
}

impl WatchOptions {
    /// The version to replay history after, or `None` to start from a snapshot.
    pub fn resume_after(&self) -> Option<u64> {
        match self.resource_version {
            Some(rv) if rv > 0 && !self.send_initial_events => Some(rv),
            _ => None,
        }
    }
}

/// Whether the query asks for a watch (`watch=true`) rather than a list.
pub fn is_watch(query: &HashMap<String, String>) -> bool {
    query.get("watch").is_some_and(|w| flag(w))
}

fn flag(value: &str) -> bool {
    value == "true" || value == "1"
}

fn selectors(query: &HashMap<String, String>) -> Result<(LabelSelector, FieldSelector), Error> {
    Ok((
        LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?,
        FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))?,
    ))
}

fn resource_version(query: &HashMap<String, String>) -> Result<Option<u64>, Error> {
    match query.get("resourceVersion").map(String::as_str) {
        None | Some("") => Ok(None),
        Some(rv) => rv
            .parse::<u64>()
            .map(Some)
            .map_err(|_| Error::BadRequest(format!("resourceVersion {rv:?} is not a valid resource version"))),
    }
}

impl ListOptions {
    pub fn from_query(query: &HashMap<String, String>, namespace: Option<String>) -> Result<Self, Error> {
        let (labels, fields) = selectors(query)?;
        Ok(Self {
            namespace,
            labels,
            fields,
            limit: query.get("limit").and_then(|l| l.parse().ok()),
            continue_token: query.get("continue").filter(|c| !c.is_empty()).cloned(),
            resource_version: resource_version(query)?,
            exact: query.get("resourceVersionMatch").is_some_and(|m| m == "Exact"),
        })
    }
}

impl WatchOptions {
    pub fn from_query(query: &HashMap<String, String>, namespace: Option<String>) -> Result<Self, Error> {
        let (labels, fields) = selectors(query)?;
        let allow_bookmarks = query.get("allowWatchBookmarks").is_some_and(|b| flag(b));
        let send_initial_events = match query.get("sendInitialEvents").map(String::as_str) {
            Some("true" | "1") => true,
            Some("false" | "0") | None => false,
            Some(other) => return Err(Error::BadRequest(format!("invalid sendInitialEvents {other:?}"))),
        };
        if send_initial_events {
            let invalid =
                |field: &str, message: &str| Error::InvalidOptions { field: field.into(), message: message.into() };
            if query.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
                return Err(invalid(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if !allow_bookmarks {
                return Err(invalid(
                    "allowWatchBookmarks",
                    "sendInitialEvents requires setting allowWatchBookmarks=true",
                ));
            }
        }
        Ok(Self {
            namespace,
            labels,
            fields,
            resource_version: resource_version(query)?,
            allow_bookmarks,
            send_initial_events,
            timeout: query.get("timeoutSeconds").and_then(|t| t.parse::<u64>().ok()).map(Duration::from_secs),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn streaming_list_rules_are_422_and_malformed_values_400() {
        let code = |pairs: &[(&str, &str)]| WatchOptions::from_query(&query(pairs), None).err().map(|e| e.code());
        assert_eq!(code(&[("sendInitialEvents", "true"), ("allowWatchBookmarks", "true")]), Some(422));
        assert_eq!(code(&[("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan")]), Some(422));
        assert_eq!(code(&[("sendInitialEvents", "maybe")]), Some(400));
        assert_eq!(code(&[("resourceVersion", "abc")]), Some(400));
        assert_eq!(code(&[("labelSelector", "app in a")]), Some(400));
        let streaming = [
            ("sendInitialEvents", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("resourceVersion", "7"),
            ("timeoutSeconds", "30"),
        ];
        let opts = WatchOptions::from_query(&query(&streaming), None).expect("valid streaming list");
        assert_eq!((opts.resume_after(), opts.timeout), (None, Some(Duration::from_secs(30))));
        let resume = WatchOptions::from_query(&query(&[("resourceVersion", "7")]), None).expect("valid");
        assert_eq!(resume.resume_after(), Some(7));
        assert!(is_watch(&query(&[("watch", "1")])) && !is_watch(&query(&[("watch", "false")])));
    }

    #[test]
    fn list_options_parse() {
        let opts = ListOptions::from_query(
            &query(&[("limit", "5"), ("continue", ""), ("resourceVersion", "3"), ("resourceVersionMatch", "Exact")]),
            Some("ns".into()),
        )
        .expect("valid");
        assert_eq!(
            (opts.limit, opts.continue_token, opts.resource_version, opts.exact),
            (Some(5), None, Some(3), true)
        );
    }
}
