//! A log of the requests the server answered, so tests can prove what a client did NOT
//! do (e.g. "no write requests during a minute of node heartbeats"). Bounded: the oldest
//! entries are dropped, and every entry carries its sequence number so a test can ask for
//! "everything since this mark" without racing the log's growth.

use std::collections::VecDeque;
use std::sync::Mutex;

/// One answered request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// Position in the server's lifetime (first request = 0).
    pub seq: u64,
    pub method: String,
    pub path: String,
    pub query: String,
    pub status: u16,
    /// The bearer token the request carried. Nobody is authenticated here: a token only
    /// names the caller, so a test can tell which client made which request (give each
    /// client a kubeconfig with `token: <its name>`).
    pub user: Option<String>,
    /// The `Impersonate-User` header, when the request carried one (nothing is
    /// impersonated here: it shows what a proxy passed on).
    pub impersonating: Option<String>,
}

impl RecordedRequest {
    /// Whether the request could change stored state (anything but GET/HEAD/OPTIONS).
    pub fn is_write(&self) -> bool {
        !matches!(self.method.as_str(), "GET" | "HEAD" | "OPTIONS")
    }
}

pub struct RequestLog {
    capacity: usize,
    inner: Mutex<(u64, VecDeque<RecordedRequest>)>,
}

impl RequestLog {
    pub fn new(capacity: usize) -> Self {
        Self { capacity, inner: Mutex::new((0, VecDeque::new())) }
    }

    pub(crate) fn record_as(
        &self,
        method: &str,
        path: &str,
        query: &str,
        status: u16,
        user: Option<&str>,
        impersonating: Option<&str>,
    ) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let seq = inner.0;
        inner.0 += 1;
        if inner.1.len() == self.capacity {
            inner.1.pop_front();
        }
        inner.1.push_back(RecordedRequest {
            seq,
            method: method.into(),
            path: path.into(),
            query: query.into(),
            status,
            user: user.map(str::to_string),
            impersonating: impersonating.map(str::to_string),
        });
    }

    /// The sequence number the next request will get: a mark for [`RequestLog::since`].
    pub fn mark(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// The retained requests numbered `mark` or later, oldest first.
    pub fn since(&self, mark: u64) -> Vec<RecordedRequest> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.1.iter().filter(|r| r.seq >= mark).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_entries_and_answers_since_a_mark() {
        let log = RequestLog::new(2);
        log.record_as("GET", "/a", "", 200, None, None);
        let mark = log.mark();
        log.record_as("PATCH", "/b", "fieldManager=x", 200, None, None);
        log.record_as("DELETE", "/c", "", 404, None, None);
        let since: Vec<(u64, String, bool)> =
            log.since(mark).into_iter().map(|r| (r.seq, r.path.clone(), r.is_write())).collect();
        assert_eq!(since, [(1, "/b".to_string(), true), (2, "/c".to_string(), true)]);
        assert_eq!(log.since(0).len(), 2, "capacity bounds the log");
        assert_eq!(log.mark(), 3);
    }
}
