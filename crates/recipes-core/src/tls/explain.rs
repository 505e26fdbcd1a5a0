//! A backend's connect, with its failure explained in TLS terms when TLS
//! is the reason: the same steps on every backend.

use std::future::Future;
use std::time::Duration;

use super::problem::classify;
use super::{Prelude, TlsFiles, Verify};
use crate::connect::no_server_answered;
use crate::error::{Error, Result};

/// The part of the connect timeout the connect itself may take; the rest
/// is for asking the server why it failed ([`diagnose`](super::diagnose)),
/// so that the explained error still comes within the connect timeout.
const CONNECT_SHARE: (u32, u32) = (3, 4);

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
            unanswered: (format!("no server at {target}"), "it is up"),
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

    /// Run `connect` within three quarters of `budget`. When it fails the
    /// way a TLS mismatch makes a connect fail — a timeout, a lost
    /// connection, a retryable backend error — ask the first server with
    /// the rest of the budget ([`Probe::diagnose`]) and return what it
    /// found. A rustls error in the failure's source chain is explained
    /// without asking (see [`explain`]).
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
        let share = budget * CONNECT_SHARE.0 / CONNECT_SHARE.1;
        let failed = match tokio::time::timeout(share, connect).await {
            Ok(Ok(connected)) => return Ok(connected),
            Ok(Err(e)) => explain(e, &self.target, self.sends_cert()),
            Err(_) => Error::Timeout {
                what: what.to_owned(),
                after: budget,
            },
        };
        let unexplained = match &failed {
            Error::Timeout { .. } | Error::ConnectionLoss => true,
            Error::Backend { retryable, .. } => *retryable,
            _ => false,
        };
        if !unexplained {
            return Err(failed);
        }
        match self.diagnose(budget.saturating_sub(share)).await {
            Some(found) => Err(found),
            None if matches!(failed, Error::Timeout { .. } | Error::ConnectionLoss) => {
                let (who, check) = &self.unanswered;
                Err(no_server_answered(who, budget, check))
            }
            None => Err(failed),
        }
    }
}
