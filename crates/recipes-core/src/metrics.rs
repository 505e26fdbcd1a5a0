//! The metrics of every recipe on every store, emitted once, here, through
//! the [`metrics`] facade: the application installs the recorder or
//! exporter it wants (none installed: nothing is recorded). The table of
//! names, types, labels and units is in `docs/guide.md` ("Metrics").
//!
//! Labels are fixed-cardinality: `store` (`zk`, `etcd`, `pg`, `redis`:
//! [`Client::store`](crate::Client::store)), `recipe`
//! (`mutex`, `semaphore`, `election`, `latch`, `selector`), `outcome`,
//! `reason`, `kind`. A recipe's `name` is a label only when asked for
//! (`with_name_label` on the recipe): names are unbounded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics::{counter, gauge, histogram, Label};

use crate::error::{Error, Result};
use crate::loss::{LossReason, LossSignal};

/// Acquisition wait, from the call to its outcome (histogram, seconds;
/// `store`, `recipe`, `outcome` = `acquired` | `timed_out` | `failed`).
pub const ACQUIRE_SECONDS: &str = "recipes_acquire_seconds";
/// How long a lock, permit or leadership was held (histogram, seconds;
/// `store`, `recipe`), recorded when the guard ends.
pub const HOLD_SECONDS: &str = "recipes_hold_seconds";
/// Holdings lost before their release (counter; `store`, `recipe`,
/// `reason`), counted the moment the loss signal fires.
pub const LOSSES: &str = "recipes_losses_total";
/// Leaderships this process holds now (gauge; `store`, `recipe`).
pub const LEADER: &str = "recipes_leader";
/// Leadership gained or ended (counter; `store`, `recipe`).
pub const LEADERSHIP_TRANSITIONS: &str = "recipes_leadership_transitions_total";
/// Time left on the local lease deadline right after each acknowledged
/// renewal (histogram, seconds; `store`).
pub const LEASE_MARGIN_SECONDS: &str = "recipes_lease_margin_seconds";
/// Failed calls to the store by error kind (counter; `store`, `kind` =
/// [`Error::kind`]).
pub const ERRORS: &str = "recipes_errors_total";

/// Who a recipe's metrics and state-change logs are about.
#[derive(Debug, Clone)]
pub(crate) struct Labels {
    store: Arc<str>,
    recipe: &'static str,
    // Always in the logs; a metrics label only when asked for.
    name: Arc<str>,
    name_label: bool,
    participant: Option<Arc<str>>,
}

impl Labels {
    /// The labels of a `recipe` named `name` served by the runtime of
    /// `store`.
    pub(crate) fn new(store: &str, recipe: &'static str, name: &str) -> Labels {
        Labels {
            store: store.into(),
            recipe,
            name: name.into(),
            name_label: false,
            participant: None,
        }
    }

    /// Add the recipe's name as a metrics label.
    pub(crate) fn with_name_label(mut self) -> Labels {
        self.name_label = true;
        self
    }

    /// The participant id the logs show (a latch's or selector's).
    pub(crate) fn with_participant(mut self, id: &str) -> Labels {
        self.participant = Some(id.into());
        self
    }

    /// How the logs name the recipe: `[etcd mutex /locks/x id=web-1]`.
    fn who(&self) -> String {
        let id = self.participant.as_deref().map(|id| format!(" id={id}"));
        let (store, recipe, name) = (&self.store, self.recipe, &self.name);
        format!("[{store} {recipe} {name}{}]", id.unwrap_or_default())
    }

    fn labels(&self, extra: Option<(&'static str, &'static str)>) -> Vec<Label> {
        let mut labels = vec![
            Label::new("store", self.store.clone()),
            Label::new("recipe", self.recipe),
        ];
        if self.name_label {
            labels.push(Label::new("name", self.name.clone()));
        }
        if let Some((key, value)) = extra {
            labels.push(Label::new(key, value));
        }
        labels
    }

    /// Run an acquisition, recording how long it waited and how it ended
    /// (an `Ok(None)` is a timeout).
    pub(crate) fn timed<T>(
        &self,
        acquire: impl FnOnce() -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let started = Instant::now();
        let got = acquire();
        self.acquisition(started, &got);
        got
    }

    /// An acquisition that began at `started` ended as `got` says.
    pub(crate) fn acquisition<T>(&self, started: Instant, got: &Result<Option<T>>) {
        let outcome = match got {
            Ok(Some(_)) => "acquired",
            Ok(None) => "timed_out",
            Err(_) => "failed",
        };
        let waited = started.elapsed();
        match got {
            Ok(Some(_)) => log::info!("{} acquired after {waited:?}", self.who()),
            Ok(None) => log::debug!("{} not acquired within {waited:?}", self.who()),
            Err(e) => log::info!("{} acquisition failed after {waited:?}: {e}", self.who()),
        }
        let labels = self.labels(Some(("outcome", outcome)));
        histogram!(ACQUIRE_SECONDS, labels).record(waited.as_secs_f64());
    }

    /// A holding began: count its loss when `signal` fires (a release is
    /// no loss) and, for a leadership, keep the leader gauge.
    pub(crate) fn holding(&self, signal: &LossSignal, leadership: bool) {
        if leadership {
            gauge!(LEADER, self.labels(None)).increment(1.0);
            counter!(LEADERSHIP_TRANSITIONS, self.labels(None)).increment(1);
        }
        let this = self.clone();
        signal.on_fire(move |reason| {
            match reason {
                LossReason::Released => log::info!("{} released", this.who()),
                _ => log::warn!("{} lost: {reason}", this.who()),
            }
            if leadership {
                gauge!(LEADER, this.labels(None)).decrement(1.0);
                counter!(LEADERSHIP_TRANSITIONS, this.labels(None)).increment(1);
            }
            if reason != LossReason::Released {
                counter!(LOSSES, this.labels(Some(("reason", reason.label())))).increment(1);
            }
        });
    }

    /// A holding that began at `since` ended.
    pub(crate) fn held(&self, since: Instant) {
        histogram!(HOLD_SECONDS, self.labels(None)).record(since.elapsed().as_secs_f64());
    }
}

/// An acknowledged renewal left `margin` on the local deadline.
pub(crate) fn lease_margin(store: &str, margin: Duration) {
    let labels = vec![Label::new("store", store.to_string())];
    histogram!(LEASE_MARGIN_SECONDS, labels).record(margin.as_secs_f64());
}

/// A call to the store of `store` failed with `e`.
pub(crate) fn error(store: &str, e: &Error) {
    let labels = vec![
        Label::new("store", store.to_string()),
        Label::new("kind", e.kind()),
    ];
    counter!(ERRORS, labels).increment(1);
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex as PlMutex;

    use crate::loss::LossReason;
    use crate::mutex::Mutex;
    use crate::test_backend::MemoryMutex;

    /// Every record logged in this test process.
    static RECORDS: PlMutex<Vec<String>> = PlMutex::new(Vec::new());

    struct Capture;

    impl log::Log for Capture {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }

        fn log(&self, record: &log::Record<'_>) {
            RECORDS.lock().push(record.args().to_string());
        }

        fn flush(&self) {}
    }

    fn logged(text: &str) -> bool {
        RECORDS.lock().iter().any(|r| r.contains(text))
    }

    #[test]
    fn state_changes_are_logged_with_the_store_recipe_and_name() {
        let _ = log::set_logger(&Capture);
        log::set_max_level(log::LevelFilter::Debug);
        let m = Mutex::from_backend(MemoryMutex::new());
        let who = "[memory-backend mutex /memory]";
        let guard = m.try_lock().unwrap().expect("free");
        assert!(
            logged(&format!("{who} acquired after")),
            "{:?}",
            RECORDS.lock()
        );
        guard.lease().trigger().fire(LossReason::Deleted);
        assert!(logged(&format!("{who} lost: {}", LossReason::Deleted)));
        assert!(guard.release().is_err(), "released after its loss");
        let again = m.try_lock().unwrap().expect("free again");
        again.release().unwrap();
        assert!(logged(&format!("{who} released")));
    }
}
