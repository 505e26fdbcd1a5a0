//! A count-down latch over a shared counter, as Redisson's
//! `RCountDownLatch`: set a count once, count it down from anywhere, wait
//! until it reaches zero.

use std::fmt;
use std::time::{Duration, Instant};

use crate::counter::{Counter, CounterBackend};
use crate::error::{Error, Result};
use crate::limits::check_timeout;

/// A count-down latch on a counter; see [`Client::count_down_latch`](crate::Client::count_down_latch).
pub struct CountDownLatch<B: CounterBackend> {
    counter: Counter<B>,
}

impl<B: CounterBackend> fmt::Debug for CountDownLatch<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &self.counter.name())
            .finish()
    }
}

impl<B: CounterBackend> CountDownLatch<B> {
    /// A latch kept in `counter`.
    pub fn new(counter: Counter<B>) -> CountDownLatch<B> {
        CountDownLatch { counter }
    }

    /// The counter it is kept in.
    pub fn counter(&self) -> &Counter<B> {
        &self.counter
    }

    /// Set the count to `count` if the latch is open (its count is zero or
    /// it does not exist); `Ok(false)` when it is still counting down, as
    /// Redisson's `trySetCount`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a count of 0 or one that does not fit
    /// the counter; as for [`Counter::get`].
    pub fn try_set_count(&self, count: u32) -> Result<bool> {
        if count == 0 {
            return Err(Error::invalid(
                "a count-down latch's count must be at least 1",
            ));
        }
        loop {
            let seen = self.counter.get()?;
            if seen.value > 0 {
                return Ok(false);
            }
            if self.counter.set_if(seen.version, i64::from(count))? {
                return Ok(true);
            }
        }
    }

    /// Count down by one (nothing when already zero); returns the count
    /// left.
    ///
    /// # Errors
    ///
    /// [`Error::Indeterminate`] when the write's reply never came (the
    /// count may have gone down: read it before counting down again); as
    /// for [`Counter::get`].
    pub fn count_down(&self) -> Result<i64> {
        let done = self
            .counter
            .update(|value| Ok((value > 0).then_some(value - 1)))?;
        Ok(done.now.value.max(0))
    }

    /// The count left (0 when open).
    ///
    /// # Errors
    ///
    /// As for [`Counter::get`].
    pub fn count(&self) -> Result<i64> {
        Ok(self.counter.get()?.value.max(0))
    }

    /// Wait until the count is zero.
    ///
    /// # Errors
    ///
    /// As for [`Counter::get`].
    pub fn wait(&self) -> Result<()> {
        self.wait_until(None).map(|_| ())
    }

    /// Wait at most `timeout` until the count is zero; `Ok(false)` when it
    /// was not by then (a zero timeout looks once).
    ///
    /// # Errors
    ///
    /// As for [`Counter::get`]; a timeout above the limit.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<bool> {
        if !timeout.is_zero() {
            check_timeout("wait", timeout)?;
        }
        self.wait_until(Some(Instant::now() + timeout))
    }

    /// One wait on the store's notification until a read finds the count
    /// at zero.
    fn wait_until(&self, deadline: Option<Instant>) -> Result<bool> {
        let open =
            crate::counter::wait::until(self.counter.backend(), deadline, |now| now.value <= 0)?;
        Ok(open.is_some())
    }
}
