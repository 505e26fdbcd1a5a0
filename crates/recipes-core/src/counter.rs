//! The shared counter: a value with a version, compare-and-set, an `add`
//! retried over compare-and-set, a watch of its changes. Written once here
//! over two verbs a store supplies ([`CounterBackend::get`] and
//! [`CounterBackend::set_if`]).
//!
//! Every store counts versions the same way: `0` while the counter does not
//! exist (its value then reads `0`), `1` once it was first written, one more
//! for every write after that. A reader can thus tell a stale view (a
//! smaller version) and a watch can tell how many changes it did not see.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::barrier::OnRuntime;
use crate::engine::WaitStore;
use crate::error::{Error, Result};
use crate::limits::{check_timeout, quote};

/// A counter's value and the version it was read at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versioned {
    /// The value (`0` while the counter does not exist).
    pub value: i64,
    /// `0` while the counter does not exist; one more for every write.
    pub version: u64,
}

/// The width of a counter's value in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterKind {
    /// A 32-bit signed value: on ZooKeeper Curator's `SharedCount` encoding
    /// (4 bytes, big-endian), which Curator and kazoo read and write. A
    /// value outside `i32` is refused with [`Error::InvalidArgument`].
    I32,
    /// A 64-bit signed value (on ZooKeeper 8 bytes, big-endian: Curator's
    /// `SharedCount` cannot read it).
    I64,
}

impl CounterKind {
    /// Whether `value` fits.
    pub fn fits(self, value: i64) -> bool {
        match self {
            CounterKind::I32 => i32::try_from(value).is_ok(),
            CounterKind::I64 => true,
        }
    }

    /// How the kind is named in messages.
    pub fn describe(self) -> &'static str {
        match self {
            CounterKind::I32 => "32-bit",
            CounterKind::I64 => "64-bit",
        }
    }

    /// Decode a stored value of this kind: big-endian, 4 or 8 bytes (the
    /// ZooKeeper encoding; other stores keep numbers natively).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming `name` when `data` is not such a
    /// value (another recipe's data, or the other kind).
    pub fn decode(self, name: &str, data: &[u8]) -> Result<i64> {
        match (self, data.len()) {
            (CounterKind::I32, 4) => Ok(i64::from(i32::from_be_bytes(
                data.try_into().expect("4 bytes"),
            ))),
            (CounterKind::I64, 8) => Ok(i64::from_be_bytes(data.try_into().expect("8 bytes"))),
            (kind, n) => Err(Error::invalid(format!(
                "{} holds {n} bytes of data, not a {} counter ({} bytes, big-endian): it is \
                 another recipe's or the other kind of counter; open it with that recipe, or \
                 choose another name",
                quote(name),
                kind.describe(),
                kind.width()
            ))),
        }
    }

    /// Encode `value` as this kind stores it on ZooKeeper.
    pub fn encode(self, value: i64) -> Vec<u8> {
        match self {
            CounterKind::I32 => (value as i32).to_be_bytes().to_vec(),
            CounterKind::I64 => value.to_be_bytes().to_vec(),
        }
    }

    fn width(self) -> usize {
        match self {
            CounterKind::I32 => 4,
            CounterKind::I64 => 8,
        }
    }
}

/// What a store supplies for a counter: a read, a compare-and-set, and a
/// read that arms the store's change notification. The waits
/// ([`CounterWatch`], the count-down latch's) are the engine's wait shape
/// ([`wait_until`](crate::engine::wait_until)), written once here.
pub trait CounterBackend: Clone + Send + Sync + 'static {
    /// The wait store of the counter's name.
    type Waits: WaitStore + OnRuntime;

    /// The counter's name (path or key).
    fn name(&self) -> &str;

    /// Its kind.
    fn kind(&self) -> CounterKind;

    /// Read the value and its version (`version` 0, value 0 when absent).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the name holds something that is not
    /// a counter of this kind; connection errors.
    fn get(&self) -> Result<Versioned>;

    /// Write `value` if the version is still `version` (0: only if the
    /// counter does not exist). `Ok(false)` when it is not.
    ///
    /// # Errors
    ///
    /// As for [`get`](CounterBackend::get);
    /// [`Error::Indeterminate`] when no reply came (it may have landed).
    fn set_if(&self, version: u64, value: i64) -> Result<bool>;

    /// [`set_if`](CounterBackend::set_if), saying on a conflict what the
    /// counter holds now where the store reads it in the same round trip
    /// (an etcd transaction's else branch, a script's reply), so that a
    /// retried `add` does not read again. The default calls `set_if` and
    /// returns [`SetIf::Conflict`]`(None)` on a conflict.
    ///
    /// # Errors
    ///
    /// As for [`set_if`](CounterBackend::set_if).
    fn set_if_seen(&self, version: u64, value: i64) -> Result<SetIf> {
        Ok(if self.set_if(version, value)? {
            SetIf::Set
        } else {
            SetIf::Conflict(None)
        })
    }

    /// Delete the counter if its version is still `version`; `Ok(false)`
    /// when it is not.
    ///
    /// # Errors
    ///
    /// As for [`set_if`](CounterBackend::set_if).
    fn delete_if(&self, version: u64) -> Result<bool>;

    /// The store the counter's waits run on: its session epochs and the
    /// name's change notifications (the store's barriers and groups run
    /// on the same one).
    fn waits(&self) -> &Self::Waits;

    /// Read as [`get`](CounterBackend::get) does, under `epoch`, with a
    /// notification armed on the counter's next change: armed before the
    /// read or by it, so that no write after the read goes unheard.
    ///
    /// # Errors
    ///
    /// As for [`get`](CounterBackend::get).
    fn read_armed(
        &self,
        epoch: &WaitEpoch<Self>,
    ) -> impl Future<Output = Result<(Versioned, WaitWatch<Self>)>> + Send;
}

/// What [`CounterBackend::set_if_seen`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetIf {
    /// The value was written.
    Set,
    /// The version had moved on; the counter as the same round trip read
    /// it, when it did.
    Conflict(Option<Versioned>),
}

/// The epoch of a counter's wait store.
pub type WaitEpoch<B> = <<B as CounterBackend>::Waits as WaitStore>::Epoch;
/// The notification a counter's read arms.
pub type WaitWatch<B> = <<B as CounterBackend>::Waits as WaitStore>::Watch;

/// A shared counter (Curator's `SharedCount`, Redisson's `RAtomicLong`).
pub struct Counter<B: CounterBackend> {
    backend: B,
}

impl<B: CounterBackend> fmt::Debug for Counter<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counter")
            .field("name", &self.backend.name())
            .field("kind", &self.backend.kind())
            .finish()
    }
}

/// What [`Counter::add_counted`] did: the new value and how many
/// compare-and-sets lost to another writer before it won.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Added {
    /// The value after the add, with its version.
    pub now: Versioned,
    /// Compare-and-sets that found the counter changed and were retried.
    pub conflicts: u64,
}

impl<B: CounterBackend> Counter<B> {
    /// Wrap a backend.
    pub fn from_backend(backend: B) -> Counter<B> {
        Counter { backend }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The counter's name.
    pub fn name(&self) -> &str {
        self.backend.name()
    }

    /// Its kind.
    pub fn kind(&self) -> CounterKind {
        self.backend.kind()
    }

    /// The value with its version (`0`, version `0`, while it does not
    /// exist).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the name holds another recipe's data
    /// or the other kind of counter; connection errors.
    pub fn get(&self) -> Result<Versioned> {
        self.backend.get()
    }

    /// Set `value` if the counter is still at `version` (0: only if it does
    /// not exist yet); `Ok(false)` when another write came first.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `value` does not fit the kind;
    /// [`Error::Indeterminate`] when no reply came (it may have landed:
    /// read before trying again); as for [`get`](Counter::get).
    pub fn set_if(&self, version: u64, value: i64) -> Result<bool> {
        self.check_fits(value, || format!("{value}"))?;
        self.backend
            .set_if(version, value)
            .map_err(Error::unconfirmed)
    }

    /// Set `value` whatever the counter holds; returns the new version.
    ///
    /// # Errors
    ///
    /// As for [`set_if`](Counter::set_if).
    pub fn set(&self, value: i64) -> Result<Versioned> {
        self.update(|_| Ok(Some(value))).map(|a| a.now)
    }

    /// Add `delta` (negative to subtract), retrying the compare-and-set
    /// until it wins; returns the new value.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the sum does not fit the kind (the
    /// counter is left as it was); [`Error::Indeterminate`] when a write's
    /// reply never came: the add may have landed, so adding again may
    /// count it twice (read the value first where that matters); as for
    /// [`get`](Counter::get).
    pub fn add(&self, delta: i64) -> Result<i64> {
        self.add_counted(delta).map(|a| a.now.value)
    }

    /// [`add`](Counter::add), also saying how many compare-and-sets lost.
    ///
    /// # Errors
    ///
    /// As for [`add`](Counter::add).
    pub fn add_counted(&self, delta: i64) -> Result<Added> {
        self.update(|value| {
            value.checked_add(delta).map(Some).ok_or_else(|| {
                Error::invalid(format!(
                    "adding {delta} to {value} overflows a 64-bit integer"
                ))
            })
        })
    }

    /// Apply `change` to the current value by compare-and-set, retried until
    /// it wins; `change` returns `None` to leave the counter as it is.
    pub(crate) fn update(&self, change: impl Fn(i64) -> Result<Option<i64>>) -> Result<Added> {
        let mut conflicts = 0;
        let mut pause = Backoff::new(Duration::from_millis(1), Duration::from_millis(50));
        let mut seen = self.backend.get()?;
        loop {
            let Some(value) = change(seen.value)? else {
                return Ok(Added {
                    now: seen,
                    conflicts,
                });
            };
            self.check_fits(value, || format!("{value} (from {})", seen.value))?;
            let set = self.backend.set_if_seen(seen.version, value);
            let now = match set.map_err(Error::unconfirmed)? {
                SetIf::Set => {
                    let now = Versioned {
                        value,
                        version: seen.version + 1,
                    };
                    return Ok(Added { now, conflicts });
                }
                SetIf::Conflict(now) => now,
            };
            conflicts += 1;
            // Every loser of a round retries at once; after a few losses
            // back off a little so a winner's next round is not starved.
            if conflicts > 3 {
                std::thread::sleep(pause.next_pause());
            }
            // What the conflict read is current unless we slept on it.
            seen = match now {
                Some(now) if conflicts <= 3 => now,
                _ => self.backend.get()?,
            };
        }
    }

    /// Delete the counter (it then reads `0`, version `0`); `Ok(false)` when
    /// it did not exist.
    ///
    /// # Errors
    ///
    /// As for [`get`](Counter::get).
    pub fn delete(&self) -> Result<bool> {
        loop {
            let seen = self.backend.get()?;
            if seen.version == 0 {
                return Ok(false);
            }
            if self
                .backend
                .delete_if(seen.version)
                .map_err(Error::unconfirmed)?
            {
                return Ok(true);
            }
        }
    }

    /// A watch of the counter's changes from its current version on.
    ///
    /// # Errors
    ///
    /// As for [`get`](Counter::get).
    pub fn watch(&self) -> Result<CounterWatch<'_, B>> {
        let last = self.backend.get()?;
        Ok(CounterWatch {
            counter: self,
            last,
        })
    }

    /// Wait until the counter differs from `seen` — its version, or its
    /// value at the same version (deleted and written again up to that
    /// version meanwhile) — at most `timeout` (`None`: as long as it
    /// takes); `Ok(None)` on timeout.
    pub(crate) fn wait_change(
        &self,
        seen: Versioned,
        timeout: Option<Duration>,
    ) -> Result<Option<Versioned>> {
        let deadline = match timeout {
            Some(t) => {
                if !t.is_zero() {
                    check_timeout("wait", t)?;
                }
                Some(Instant::now() + t)
            }
            None => None,
        };
        wait::until(&self.backend, deadline, move |now| now != seen)
    }

    fn check_fits(&self, value: i64, shown: impl FnOnce() -> String) -> Result<()> {
        let kind = self.backend.kind();
        if kind.fits(value) {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "{} does not fit the {} counter {}, which stays as it was; use a 64-bit counter \
             (counter64) for values outside -2147483648..=2147483647",
            shown(),
            kind.describe(),
            quote(self.backend.name())
        )))
    }
}

/// One change a [`CounterWatch`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterChange {
    /// The value now.
    pub now: Versioned,
    /// How many writes came between the previous change seen and this one
    /// that the watch did not see (`0`: none missed).
    pub missed: u64,
    /// The counter was deleted (version 0) or deleted and written again
    /// (its version went back, or came back to the one seen with another
    /// value): the missed count is then unknown.
    pub restarted: bool,
}

/// The changes of a counter in order, each saying how many it missed; see
/// [`Counter::watch`].
pub struct CounterWatch<'a, B: CounterBackend> {
    counter: &'a Counter<B>,
    last: Versioned,
}

impl<B: CounterBackend> fmt::Debug for CounterWatch<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CounterWatch")
            .field("counter", &self.counter.name())
            .field("last", &self.last)
            .finish()
    }
}

impl<B: CounterBackend> CounterWatch<'_, B> {
    /// The value the watch saw last.
    pub fn last(&self) -> Versioned {
        self.last
    }

    /// The next change, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// As for [`Counter::get`].
    pub fn next_change(&mut self) -> Result<CounterChange> {
        loop {
            if let Some(change) = self.next_within(None)? {
                return Ok(change);
            }
        }
    }

    /// The next change, waiting at most `timeout` (zero: a look now);
    /// `Ok(None)` on timeout.
    ///
    /// # Errors
    ///
    /// As for [`Counter::get`]; a timeout above the limit.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<CounterChange>> {
        self.next_within(Some(timeout))
    }

    fn next_within(&mut self, timeout: Option<Duration>) -> Result<Option<CounterChange>> {
        let Some(now) = self.counter.wait_change(self.last, timeout)? else {
            return Ok(None);
        };
        let restarted = now.version <= self.last.version || now.version == 0;
        let missed = if restarted {
            0
        } else {
            now.version - self.last.version - 1
        };
        self.last = now;
        Ok(Some(CounterChange {
            now,
            missed,
            restarted,
        }))
    }
}

#[path = "counter_wait.rs"]
pub(crate) mod wait;

#[cfg(test)]
#[path = "counter_tests.rs"]
mod tests;
