//! The renewal loop against a scripted store: renewals that fail fast or
//! go unanswered cost no lease while the store answers again in time.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::lease_session::{LeaseSession, LeaseStore, Opened};
use crate::limits::Settings;
use crate::renewal::{Renewal, RenewalStream};
use crate::runtime::Runtime;

/// What the store does with a renewal: in the order sent.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Answers at once with an error (a reset connection, a restart).
    Fail,
    /// Never answers (a server cut off).
    Hang,
    /// Renews.
    Grant,
}

#[derive(Clone)]
struct Scripted {
    ttl: Duration,
    script: Arc<Mutex<VecDeque<Step>>>,
    /// Told of every renewal granted.
    granted: crossbeam_channel::Sender<()>,
    /// Told of every audit of the session's entries.
    audited: crossbeam_channel::Sender<()>,
}

struct Stream {
    store: Scripted,
    sent: VecDeque<Step>,
}

impl RenewalStream for Stream {
    async fn send(&mut self) -> Result<()> {
        let step = self.store.script.lock().pop_front().unwrap_or(Step::Grant);
        self.sent.push_back(step);
        Ok(())
    }

    async fn reply(&mut self) -> Result<Renewal> {
        match self.sent.front() {
            None | Some(Step::Hang) => std::future::pending().await,
            Some(Step::Fail) => {
                self.sent.pop_front();
                Err(Error::ConnectionLoss)
            }
            Some(Step::Grant) => {
                self.sent.pop_front();
                let _ = self.store.granted.send(());
                Ok(Renewal::Granted(self.store.ttl))
            }
        }
    }
}

impl LeaseStore for Scripted {
    type Renewals = Stream;

    fn label(&self, id: i64) -> String {
        format!("scripted={id}")
    }

    async fn grant(&self, _ttl: Duration, _timeout: Duration) -> Result<(i64, Duration)> {
        Ok((1, self.ttl))
    }

    async fn renewals(&self, _id: i64, _timeout: Duration) -> Result<Opened<Stream>> {
        Ok(Opened::Ready(Stream {
            store: self.clone(),
            sent: VecDeque::new(),
        }))
    }

    async fn revoke(&self, _id: i64, _timeout: Duration) -> Result<()> {
        Ok(())
    }

    const AUDITS: bool = true;

    fn audit(&self, _id: i64, _timeout: Duration) -> impl Future<Output = ()> + Send + 'static {
        let audited = self.audited.clone();
        async move {
            let _ = audited.send(());
        }
    }
}

/// A session of a 3 s TTL (a renewal every second; the deadline 2.9 s
/// after the last renewal acknowledged) over a store that does `steps` to
/// the first renewals, then renews; its renewals granted and its audits,
/// as they come.
fn session_over(
    steps: &[Step],
) -> (
    Runtime,
    Arc<LeaseSession<Scripted>>,
    crossbeam_channel::Receiver<()>,
    crossbeam_channel::Receiver<()>,
) {
    let ttl = Duration::from_secs(3);
    let (granted, renewed) = crossbeam_channel::unbounded();
    let (audited, audits) = crossbeam_channel::unbounded();
    let store = Scripted {
        ttl,
        script: Arc::new(Mutex::new(steps.iter().copied().collect())),
        granted,
        audited,
    };
    let rt = Runtime::new("renew-test").unwrap();
    let settings = Settings {
        ttl,
        ..Settings::default()
    };
    let on = rt.clone();
    let granted = async move { LeaseSession::grant(store, &settings, &on, false).await };
    let session = rt.call("grant", Duration::from_secs(10), granted).unwrap();
    (rt, session, renewed, audits)
}

/// Over a store that does `steps` to the first renewals, then renews: the
/// session must still hold once the store renewed again.
fn holds_across(steps: &[Step]) {
    let (_rt, session, renewed, _) = session_over(steps);
    comes_while_held(&session, &renewed, &format!("{steps:?}: a renewal"));
}

/// Wait for `what` on `seen`, 20 s at most, while `session` holds: lost
/// first, or no `what` in time, fails.
fn comes_while_held(
    session: &LeaseSession<Scripted>,
    seen: &crossbeam_channel::Receiver<()>,
    what: &str,
) {
    let lost = session.epoch().signal();
    crossbeam_channel::select! {
        recv(seen) -> _ => {}
        recv(lost.receiver()) -> _ => panic!("the lease was lost before {what}"),
        default(Duration::from_secs(20)) => panic!("no {what} in 20 s"),
    }
    assert!(!session.epoch().is_lost(), "lost after {what}");
}

#[test]
fn two_renewals_failing_at_once_cost_no_lease() {
    holds_across(&[Step::Fail, Step::Fail]);
}

#[test]
fn a_renewal_never_answered_is_sent_again_before_the_deadline() {
    holds_across(&[Step::Hang]);
}

/// A renewal stream that breaks more often than an audit is due (every
/// other renewal fails, so each stream lives two renewal intervals, the
/// audits come every three) does not put the audits off: their clock runs
/// across the streams.
#[test]
fn the_audits_come_while_the_renewal_stream_keeps_breaking() {
    let steps: Vec<Step> = (0..40).flat_map(|_| [Step::Grant, Step::Fail]).collect();
    let (_rt, session, _, audits) = session_over(&steps);
    comes_while_held(&session, &audits, "an audit while the stream kept breaking");
}
