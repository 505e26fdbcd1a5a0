//! A waiter queued behind a holder, for the handoff tests of every store:
//! it notes, the moment it acquires, whether the holder's release had
//! begun — a holder before that would overlap.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use recipes_core::store::MutexBackend;
use recipes_core::{Mutex, MutexGuard};

/// A thread in `mutex.lock()` behind a holder.
pub struct Behind<B: MutexBackend> {
    releasing: Arc<AtomicBool>,
    thread: JoinHandle<(bool, MutexGuard<B::Lease>)>,
}

impl<B: MutexBackend> std::fmt::Debug for Behind<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Behind")
            .field("finished", &self.thread.is_finished())
            .finish_non_exhaustive()
    }
}

impl<B: MutexBackend> Behind<B> {
    /// Start waiting for `mutex` in a thread.
    pub fn spawn(mutex: Mutex<B>) -> Behind<B> {
        let releasing = Arc::new(AtomicBool::new(false));
        let flag = releasing.clone();
        let thread = std::thread::spawn(move || {
            let g = mutex.lock().expect("the waiter acquires");
            (flag.load(Ordering::SeqCst), g)
        });
        Behind { releasing, thread }
    }

    /// `held` still holds and the waiter still waits; then `held` is
    /// released, and the waiter must acquire after that began, with a
    /// higher fence. Its guard.
    pub fn takes_over(self, held: MutexGuard<B::Lease>) -> MutexGuard<B::Lease> {
        assert!(!held.is_lost(), "the holder still holds");
        assert!(!self.thread.is_finished(), "the waiter waits while it does");
        let old_fence = held.token();
        self.releasing.store(true, Ordering::SeqCst);
        held.release().expect("release");
        let (after_release, g) = self.thread.join().expect("the waiter's thread");
        assert!(
            after_release,
            "acquired only after the holder's release began"
        );
        assert!(g.token() > old_fence, "{:?} after {old_fence:?}", g.token());
        g
    }
}
