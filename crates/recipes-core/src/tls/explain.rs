//! A backend's connect, with its failure explained in TLS terms when TLS
//! is the reason: the same steps on every backend.

use std::future::Future;
use std::time::Duration;

use super::problem::classify;
use super::{Prelude, TlsFiles, Verify};
use crate::connect::no_server_answered;
use crate::error::{Error, Result};

/// `e` as an [`Error::Tls`] when a rustls error in its source chain says
/// what went wrong (see [`classify`]); `e` itself otherwise. `target`
/// names the server (`etcd at https://h:2379`); `sent_cert` says whether
/// the client presented a certificate.
pub fn explain(e: Error, target: &str, sent_cert: bool) -> Error {
    error_in(&e, target, sent_cert).unwrap_or(e)
}

/// The [`Error::Tls`] a rustls error in `e`'s source chain names, if any.
pub fn error_in(
    e: &(dyn std::error::Error + 'static),
    target: &str,
    sent_cert: bool,
) -> Option<Error> {
    let (problem, detail) = classify(e, sent_cert)?;
    Some(problem.error(target, &detail))
}

/// Who a backend's connect reaches and how: what explains its failure in
/// TLS terms, the same way on every backend.
#[derive(Debug, Clone)]
pub struct Probe {
    /// `host:port` of the first server.
    pub addr: String,
    /// The store and its address, as errors name it (`etcd at
    /// https://h:2379`).
    pub target: String,
    /// The TLS files, when the client uses TLS.
    pub files: Option<TlsFiles>,
    /// How much of the server's certificate is checked.
    pub verify: Verify,
    /// How the store's port starts TLS.
    pub prelude: Prelude,
    /// Who did not answer (`no etcd member of …`) and what to check, for
    /// [`no_server_answered`] when nothing answered and TLS is not why.
    pub unanswered: (String, &'static str),
}

impl Probe {
    /// The probe of the server `url` names (`https://h:2379`,
    /// `rediss://:pw@h:6380/0`, `h:2181`: its `host:port`), checked fully.
    /// `who` did not answer (`no etcd member of …`) and `check` says what
    /// to check then (see [`no_server_answered`]).
    pub fn new(url: &str, target: String, files: Option<TlsFiles>, prelude: Prelude) -> Probe {
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
        Probe {
            addr: rest.split('/').next().unwrap_or_default().to_owned(),
            unanswered: (format!("no server at {target}"), ""),
            target,
            files,
            verify: Verify::Full,
            prelude,
        }
    }

    /// Name who does not answer and what to check (see
    /// [`no_server_answered`]).
    pub fn unanswered(mut self, who: String, check: &'static str) -> Probe {
        self.unanswered = (who, check);
        self
    }

    /// Whether the client presents a certificate.
    pub fn sends_cert(&self) -> bool {
        self.files
            .as_ref()
            .is_some_and(|f| f.identity_pem.is_some())
    }

    /// The [`Error::Tls`] a rustls error in `e`'s source chain names: for
    /// a client crate's own error, before it is mapped (and its source
    /// dropped).
    pub fn error_in(&self, e: &(dyn std::error::Error + 'static)) -> Option<Error> {
        error_in(e, &self.target, self.sends_cert())
    }

    /// Run `connect` within `budget`, and explain its failure in TLS
    /// terms when TLS is why. A connect that fails the way a TLS mismatch
    /// makes one fail — a timeout, a lost connection, a retryable backend
    /// error — is explained by asking the first server
    /// ([`Probe::diagnose`]) in the time left; one still running at half
    /// the budget gets the question asked beside it, and whichever answers
    /// first wins (a slow but healthy connect keeps its whole budget; some
    /// client crates retry a failed handshake until their timeout and say
    /// only that). A rustls error in the failure's source chain is
    /// explained without asking (see [`explain`]).
    ///
    /// # Errors
    ///
    /// [`Error::Tls`] when TLS is the reason; the retryable
    /// [`Error::Backend`] of [`no_server_answered`] when nothing answered
    /// in time; the connect's own error otherwise.
    pub async fn connect<T>(
        &self,
        what: &str,
        budget: Duration,
        connect: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let timeout = || Error::Timeout {
            what: what.to_owned(),
            after: budget,
        };
        let start = tokio::time::Instant::now();
        let (half, end) = (start + budget / 2, start + budget);
        let connect = tokio::time::timeout_at(end, connect);
        tokio::pin!(connect);
        // The first half: the connect alone.
        let outcome = tokio::select! {
            outcome = &mut connect => Some(outcome),
            () = tokio::time::sleep_until(half) => None,
        };
        let outcome = match outcome {
            Some(outcome) => outcome,
            // Still connecting: ask the server beside it, and take whichever
            // says something first (a slow connect keeps its whole budget).
            None => {
                let probe = self.diagnose(end.saturating_duration_since(half));
                tokio::pin!(probe);
                tokio::select! {
                    outcome = &mut connect => match outcome {
                        Ok(Ok(connected)) => return Ok(connected),
                        Ok(Err(e)) => return Err(self.unexplained(e, budget, probe.await)),
                        Err(_) => return Err(self.unexplained(timeout(), budget, None)),
                    },
                    found = &mut probe => match found {
                        Some(found) => return Err(found),
                        None => connect.await,
                    },
                }
            }
        };
        match outcome {
            Ok(Ok(connected)) => Ok(connected),
            Ok(Err(e)) => {
                let rest = end.saturating_duration_since(tokio::time::Instant::now());
                let ask = retryable_failure(&e) && self.error_in(&e).is_none();
                let found = match ask {
                    true => self.diagnose(rest).await,
                    false => None,
                };
                Err(self.unexplained(e, budget, found))
            }
            Err(_) => Err(self.unexplained(timeout(), budget, None)),
        }
    }

    /// The error of a failed connect: what the diagnosis `found`, the TLS
    /// problem in `e`'s chain, [`no_server_answered`] for a timeout or a
    /// lost connection, or `e`.
    fn unexplained(&self, e: Error, budget: Duration, found: Option<Error>) -> Error {
        if let Some(found) = found {
            return found;
        }
        match explain(e, &self.target, self.sends_cert()) {
            Error::Timeout { .. } | Error::ConnectionLoss => {
                let (who, check) = &self.unanswered;
                no_server_answered(who, budget, check)
            }
            other => other,
        }
    }
}

/// Whether `e` is how a TLS mismatch makes a connect fail: a timeout, a
/// lost connection, a retryable backend error.
fn retryable_failure(e: &Error) -> bool {
    match e {
        Error::Timeout { .. } | Error::ConnectionLoss => true,
        Error::Backend { retryable, .. } => *retryable,
        _ => false,
    }
}
