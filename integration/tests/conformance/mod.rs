//! The conformance suite: written once against the core traits and the
//! worker protocol, run for each backend by `zk_conformance.rs` and
//! `etcd_conformance.rs` through a [`Kit`].
//!
//! Properties, as `shared/testing.md` poses them:
//! 1. mutual exclusion without faults: critical sections never overlap and
//!    fences strictly increase in holding order;
//! 2. a killed holder's lock is taken no earlier than its last acknowledged
//!    renewal + the lease, and no later than the kill + the lease + slack;
//! 3. a paused holder's loss signal has fired when it resumes, and its
//!    writes are refused by the store and by a `FenceGate`;
//! 4. an expired holder's release never removes the new holder's entry
//!    (asserted at the end of property 3's test, on the same holders);
//! 6. no herd: one release wakes one waiter;
//! 7. under `LossPolicy::Deadline`, a black-holed holder's `valid_until()`
//!    passes before another client acquires.

#![allow(dead_code)]

pub mod barrier_faults;
pub mod counter;
pub mod double_barrier_rounds;
pub mod election;
pub mod errors;
pub mod exclusion;
pub mod failover;
pub mod group;
pub mod holder_faults;
pub mod metrics;
pub mod multi;
pub mod outcomes;
pub mod process_faults;
pub mod rw;
pub mod waits;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use recipes_core::store::{ElectionBackend, MutexBackend};
use recipes_core::{BootInstant, FencingToken};

// Where `conformance_suite!` calls them: `conformance::mutual_exclusion`, …
pub use exclusion::{mutual_exclusion, one_release_wakes_one_waiter};
pub use failover::{leader_failover, LeaderRecipe, Takeout};
pub use holder_faults::{
    blackholed_holder_loses_before_another_acquires, killed_holder_frees_the_lock_within_the_lease,
    paused_holder_is_fenced_out,
};

/// A server shared by the tests of one binary, or one a test owns.
pub enum Server<S: 'static> {
    /// For tests that do not break the server.
    Shared(&'static S),
    /// For tests that kill, pause or partition.
    Own(Box<S>),
}

impl<S> std::ops::Deref for Server<S> {
    type Target = S;
    fn deref(&self) -> &S {
        match self {
            Server::Shared(s) => s,
            Server::Own(s) => s,
        }
    }
}

/// What the suite needs from a backend.
pub trait Kit: Sized {
    /// The mutex backend.
    type Mutex: MutexBackend;

    /// A kit on the server shared by this test binary.
    fn shared() -> Self;

    /// A kit on a server of its own (for fault tests).
    fn own() -> Self;

    /// A client (its own session) with lease `ttl`, and a mutex on `name`.
    fn mutex(&self, name: &str, ttl: Duration) -> recipes_core::Mutex<Self::Mutex>;

    /// The client type.
    type Client: recipes_core::Client;

    /// A client of its own session with lease `ttl`, or the store's
    /// refusal of the settings.
    fn connect(&self, ttl: Duration) -> recipes_core::Result<Self::Client>;

    /// A client of its own session reached through `proxy_addr`, with lease
    /// `ttl` and RPC timeout `rpc_timeout`.
    fn connect_via(
        &self,
        proxy_addr: std::net::SocketAddr,
        ttl: Duration,
        rpc_timeout: Duration,
    ) -> recipes_core::Result<Self::Client>;

    /// The election backend.
    type Election: ElectionBackend;

    /// A client (its own session) with lease `ttl`, and an election on
    /// `name`.
    fn election(&self, name: &str, ttl: Duration) -> recipes_core::Election<Self::Election>;

    /// The entries (node paths or keys) directly below a recipe's name.
    fn entries_under(&self, name: &str) -> Vec<String>;

    /// Whether `waiters` waiters of the lock `name` have their watches set
    /// in the store (the holder's own watch aside).
    fn all_waiters_watch(&self, name: &str, waiters: usize) -> bool;

    /// Write a plain entry (node or key) `path` with `value`, as another
    /// program would.
    fn write_entry(&self, path: &str, value: &[u8]);

    /// Delete an entry behind its holder's back.
    fn delete_entry(&self, holder: &str);

    /// A client reached through `proxy_addr` instead of the server.
    fn mutex_via(
        &self,
        proxy_addr: std::net::SocketAddr,
        name: &str,
        ttl: Duration,
    ) -> recipes_core::Mutex<Self::Mutex>;

    /// The server address a proxy should forward to.
    fn server_addr(&self) -> std::net::SocketAddr;

    /// The worker's `connect` request for a client with lease `ttl`.
    fn worker_connect(&self, ttl: Duration) -> String;

    /// Whether a holder's entry (node path or key) exists in the store.
    fn exists(&self, holder: &str) -> bool;

    /// The value stored at a resource path or key.
    fn value(&self, resource: &str) -> Option<String>;

    /// The lease length the server really grants for `ttl` (it may raise it).
    fn granted(&self, ttl: Duration) -> Duration;

    /// How much after the lease's end the server may take to notice it
    /// (ZooKeeper checks sessions once per tick).
    fn expiry_granularity(&self) -> Duration;
}

/// A fresh name for one test: nothing else uses it.
/// `r` is `InvalidArgument` (`what` names the call); its message, never
/// empty.
pub fn invalid<T: std::fmt::Debug>(what: &str, r: recipes_core::Result<T>) -> String {
    match r {
        Err(recipes_core::Error::InvalidArgument(msg)) => {
            assert!(!msg.is_empty(), "{what}: an empty message");
            msg
        }
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

pub fn name(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "/conformance/{test}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn field<'a>(reply: &'a str, key: &str) -> &'a str {
    reply
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {reply:?}"))
}

fn token_of(reply: &str) -> FencingToken {
    field(reply, "token").parse().expect("token")
}

fn boot(ms: &str) -> BootInstant {
    BootInstant::from_since_boot(Duration::from_millis(ms.parse().expect("boot ms")))
}

/// One test of [`conformance_suite!`] on the binary's shared server:
/// `fn $test` runs `conformance::$path` with the kit's shared server.
#[macro_export]
macro_rules! on_shared {
    ($kit:ty, $test:ident, $($path:ident)::+) => {
        #[test]
        fn $test() {
            conformance::$($path)::+(&<$kit as conformance::Kit>::shared());
        }
    };
}

/// The whole suite for one backend's [`Kit`]: every test, unchanged. Tests
/// whose names contain `fault` run in a test group of nextest's
/// (.config/nextest.toml): those that break a client's link to the server
/// get a server of their own and run one at a time; those that only kill or
/// pause worker processes share the binary's server, each on names of its
/// own, two at a time.
#[macro_export]
macro_rules! conformance_suite {
    ($kit:ty) => {
        const LEASE: std::time::Duration = std::time::Duration::from_secs(2);

        #[test]
        fn fault_tied_barrier_falls_within_the_lease_of_its_killed_setter() {
            conformance::barrier_faults::a_tied_barrier_falls_within_the_lease_of_its_killed_setter(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
            );
        }

        #[test]
        fn fault_double_barrier_outlives_a_member_killed_in_enter_and_one_in_leave() {
            conformance::barrier_faults::a_double_barrier_outlives_a_member_killed_in_enter_and_one_in_leave(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
            );
        }

        $crate::on_shared!($kit, waits_a_barrier_removal_wakes_every_waiter_once, waits::a_barrier_removal_wakes_every_waiter_once);
        $crate::on_shared!($kit, waits_a_tied_barrier_goes_with_its_setter, waits::a_tied_barrier_goes_with_its_setter);
        $crate::on_shared!($kit, waits_a_double_barrier_gathers_count_and_leaves_nothing, waits::a_double_barrier_gathers_count_and_leaves_nothing);
        $crate::on_shared!($kit, waits_bad_input_is_refused_and_leaves_nothing, waits::bad_input_is_refused_and_leaves_nothing);
        $crate::on_shared!($kit, waits_double_barrier_back_to_back_rounds_never_hang, double_barrier_rounds::back_to_back_rounds_never_hang);
        $crate::on_shared!($kit, rw_readers_share_and_a_writer_is_alone, rw::readers_share_and_a_writer_is_alone);
        $crate::on_shared!($kit, rw_a_queued_writer_is_not_starved_by_readers, rw::a_queued_writer_is_not_starved_by_readers);
        $crate::on_shared!($kit, rw_downgrade_lets_readers_in_and_keeps_writers_out, rw::downgrade_lets_readers_in_and_keeps_writers_out);
        $crate::on_shared!($kit, rw_an_upgrade_is_refused_at_once, rw::an_upgrade_is_refused_at_once);
        $crate::on_shared!($kit, rw_timeouts_leave_nothing_behind, rw::timeouts_leave_nothing_behind);
        $crate::on_shared!($kit, rw_fences_order_writers_above_everything_before, rw::fences_order_writers_above_everything_before);
        $crate::on_shared!($kit, rw_another_recipe_on_the_name_is_refused, rw::another_recipe_on_the_name_is_refused);
        $crate::on_shared!($kit, multi_a_timed_out_multi_lock_gives_everything_back, multi::a_timed_out_multi_lock_gives_everything_back);
        $crate::on_shared!($kit, multi_one_token_per_name_and_any_loss_names_it, multi::one_token_per_name_and_any_loss_names_it);
        $crate::on_shared!($kit, multi_a_part_lost_while_waiting_is_taken_again, multi::a_part_lost_while_waiting_is_taken_again);
        $crate::on_shared!($kit, multi_bad_lists_are_refused_and_leave_nothing, multi::bad_lists_are_refused_and_leave_nothing);
        $crate::on_shared!($kit, multi_an_unanswered_release_ends_within_one_rpc_timeout, multi::an_unanswered_release_ends_within_one_rpc_timeout);

        #[test]
        fn multi_opposite_orders_never_deadlock() {
            conformance::multi::opposite_orders_never_deadlock(&<$kit as conformance::Kit>::shared(), 20);
        }

        #[test]
        fn mutual_exclusion_four_workers() {
            conformance::mutual_exclusion(&<$kit as conformance::Kit>::shared(), 4, 25);
        }

        #[test]
        fn no_herd_one_release_wakes_one_of_twenty_waiters() {
            conformance::one_release_wakes_one_waiter(&<$kit as conformance::Kit>::own(), 20);
        }

        $crate::on_shared!($kit, errors_only_the_recipes_own_entries_are_contenders, errors::only_the_recipes_own_entries_are_contenders);
        $crate::on_shared!($kit, metrics_follow_a_scripted_sequence, metrics::metrics_follow_a_scripted_sequence);
        $crate::on_shared!($kit, errors_a_refused_fenced_write_fires_the_loss_signal, errors::a_refused_fenced_write_fires_the_loss_signal);
        $crate::on_shared!($kit, election_a_latch_that_cannot_campaign_says_so_once, election::a_latch_that_cannot_campaign_says_so_once);
        $crate::on_shared!($kit, errors_bad_input_is_invalid_argument, errors::bad_input_is_invalid_argument);
        $crate::on_shared!($kit, errors_a_mismatched_semaphore_size_is_invalid_argument, errors::a_mismatched_semaphore_size_is_invalid_argument);
        $crate::on_shared!($kit, errors_an_oversized_value_is_refused_and_costs_no_lock, errors::an_oversized_value_is_refused_and_costs_no_lock);
        $crate::on_shared!($kit, errors_held_lost_and_closed_outcomes_are_the_same, errors::held_lost_and_closed_outcomes_are_the_same);

        #[test]
        fn fault_an_unanswered_read_is_timeout_and_an_unanswered_write_is_indeterminate() {
            conformance::outcomes::an_unanswered_read_is_timeout_and_an_unanswered_write_is_indeterminate(
                &<$kit as conformance::Kit>::own(),
            );
        }

        $crate::on_shared!($kit, release_after_the_lease_is_gone_is_lease_lost, outcomes::release_after_the_lease_is_gone_is_lease_lost);

        #[test]
        fn fault_an_unconfirmed_release_is_indeterminate_and_still_frees_the_lock() {
            conformance::outcomes::an_unconfirmed_release_is_indeterminate_and_still_frees_the_lock(
                &<$kit as conformance::Kit>::own(),
            );
        }

        #[test]
        fn election_terms_fence_in_order_and_observers_follow() {
            conformance::election::terms_fence_in_order_and_observers_follow(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
            );
        }

        $crate::on_shared!($kit, election_closed_waiting_latches_and_selectors_have_left_the_line, election::closed_waiters_have_left_the_line);

        #[test]
        fn election_a_deleted_leader_cannot_proclaim() {
            conformance::election::a_deleted_leader_cannot_proclaim(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
            );
        }

        #[test]
        fn fault_killed_holder_frees_the_lock_within_the_lease() {
            conformance::killed_holder_frees_the_lock_within_the_lease(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
            );
        }

        #[test]
        fn fault_paused_holder_is_fenced_out() {
            conformance::paused_holder_is_fenced_out(&<$kit as conformance::Kit>::shared(), LEASE);
        }

        #[test]
        fn fault_blackholed_holder_loses_before_another_acquires() {
            conformance::blackholed_holder_loses_before_another_acquires(
                &<$kit as conformance::Kit>::own(),
                LEASE,
            );
        }

        #[test]
        fn fault_latch_leader_killed_fails_over() {
            conformance::leader_failover(
                &<$kit as conformance::Kit>::shared(),
                conformance::LeaderRecipe::Latch,
                conformance::Takeout::Kill,
                LEASE,
            );
        }

        #[test]
        fn fault_latch_leader_paused_is_fenced_out() {
            conformance::leader_failover(
                &<$kit as conformance::Kit>::shared(),
                conformance::LeaderRecipe::Latch,
                conformance::Takeout::Pause,
                LEASE,
            );
        }

        #[test]
        fn fault_selector_leader_killed_fails_over() {
            conformance::leader_failover(
                &<$kit as conformance::Kit>::shared(),
                conformance::LeaderRecipe::Selector,
                conformance::Takeout::Kill,
                LEASE,
            );
        }

        #[test]
        fn fault_selector_leader_paused_is_fenced_out() {
            conformance::leader_failover(
                &<$kit as conformance::Kit>::shared(),
                conformance::LeaderRecipe::Selector,
                conformance::Takeout::Pause,
                LEASE,
            );
        }

        $crate::on_shared!($kit, counter_compare_and_set_by_version_and_watch, counter::compare_and_set_by_version_and_watch);
        $crate::on_shared!($kit, counter_a_watch_sees_a_counter_deleted_and_written_back_to_its_version, counter::a_watch_sees_a_counter_deleted_and_written_back_to_its_version);
        $crate::on_shared!($kit, counter_bad_input_is_refused_and_changes_nothing, counter::bad_input_is_refused_and_changes_nothing);
        $crate::on_shared!($kit, counter_a_count_down_latch_opens_at_zero, counter::a_count_down_latch_opens_at_zero);
        $crate::on_shared!($kit, counter_a_blocked_waiter_wakes_on_another_clients_write, counter::a_blocked_waiter_wakes_on_another_clients_write);
        $crate::on_shared!($kit, group_join_members_and_leave, group::join_members_and_leave);
        $crate::on_shared!($kit, group_an_unconfirmed_leave_is_indeterminate_within_the_rpc_timeout, group::an_unconfirmed_leave_is_indeterminate_within_the_rpc_timeout);
        $crate::on_shared!($kit, group_a_taken_id_is_refused_and_changes_nothing, group::a_taken_id_is_refused_and_changes_nothing);
        $crate::on_shared!($kit, group_our_own_held_id_is_refused_before_anything_is_sent, group::our_own_held_id_is_refused_before_anything_is_sent);
        $crate::on_shared!($kit, group_a_dropped_members_id_stays_claimed_until_its_removal_ended, group::a_dropped_members_id_stays_claimed_until_its_removal_ended);
        $crate::on_shared!($kit, group_a_member_whose_entry_is_deleted_is_lost, group::a_member_whose_entry_is_deleted_is_lost);
        $crate::on_shared!($kit, group_a_member_whose_id_is_taken_after_its_entry_went_is_lost, group::a_member_whose_id_is_taken_after_its_entry_went_is_lost);
        $crate::on_shared!($kit, group_watch_sees_joins_and_leaves_in_order, group::watch_sees_joins_and_leaves_in_order);
        $crate::on_shared!($kit, group_bad_input_is_refused_and_leaves_nothing, group::bad_input_is_refused_and_leaves_nothing);

        #[test]
        fn fault_group_killed_member_leaves_the_view_within_its_ttl() {
            conformance::group::killed_member_leaves_the_view_within_its_ttl(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
            );
        }

        #[test]
        fn fault_group_paused_member_is_told_lost_before_others_see_it_gone() {
            conformance::group::paused_member_is_told_lost_before_others_see_it_gone(
                &<$kit as conformance::Kit>::shared(),
                LEASE,
            );
        }
    };
}
