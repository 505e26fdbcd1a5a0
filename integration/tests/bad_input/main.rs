//! Bad input (issue 10, "Hardening"): empty, oversized and invalid names,
//! durations out of bounds, values over the servers' limits, fenced writes
//! aimed inside a recipe's layout, recipes opened on another recipe's
//! layout, wrong endpoints, lifecycle misuse, the same misuse answered the
//! same way (issue 23), and the same through the `recipes` command — on
//! every store.
//!
//! Each area is one table per store (see [`bench`]): every case asserts
//! the exact error kind or the documented outcome, that it returned within
//! its bound without a panic, that nothing it made is left in the store
//! (ZooKeeper nodes but empty containers, etcd keys and leases), and that a
//! lock the same client held before is still held after. A failing case
//! does not stop the others; the test prints the whole table.
//!
//! Cases marked `// failed on 295faf2:` failed on that commit, before the
//! fixes of issue 10; the comment says what happened then.

mod bench;
mod cli;
mod durations;
mod endpoints;
mod lifecycle;
mod misuse;
mod names;
mod stores;
mod values;

use stores::{Etcd, Pg, Redis, Zk};

/// Every case counts what is new in the whole store (nodes, keys, leases,
/// sessions), so this binary's servers are never shared with the other
/// processes of a nextest run (`integration::run_shared`): each test's
/// process starts its own, as under `cargo test`. Called first, before any
/// thread or server exists.
fn own_servers() {
    // Only under nextest, where this process runs this one test; under
    // `cargo test` nothing is shared across processes anyway, and other
    // test threads may be reading the environment.
    if std::env::var_os("NEXTEST_RUN_ID").is_some() {
        std::env::set_var("RECIPES_TEST_SHARED", "process");
    }
}

macro_rules! on_both_stores {
    ($($area:ident :: $fun:ident => $zk:ident, $etcd:ident, $redis:ident;)*) => {
        $(
            #[test]
            fn $zk() {
                own_servers();
                $area::$fun::<Zk>();
            }

            #[test]
            fn $etcd() {
                own_servers();
                $area::$fun::<Etcd>();
            }

            #[test]
            fn $redis() {
                own_servers();
                $area::$fun::<Redis>();
            }
        )*
    };
}

on_both_stores! {
    names::run => zk_bad_names_are_refused_before_anything_is_sent,
        etcd_bad_names_are_refused_before_anything_is_sent, redis_bad_names_are_refused_before_anything_is_sent;
    durations::run => zk_durations_out_of_bounds_are_refused_and_extreme_waits_work,
        etcd_durations_out_of_bounds_are_refused_and_extreme_waits_work, redis_durations_out_of_bounds_are_refused_and_extreme_waits_work;
    values::run => zk_oversized_values_and_fenced_writes_into_a_layout_are_refused,
        etcd_oversized_values_and_fenced_writes_into_a_layout_are_refused, redis_oversized_values_and_fenced_writes_into_a_layout_are_refused;
    values::run_layouts => zk_a_recipe_on_another_recipes_layout_is_refused,
        etcd_a_recipe_on_another_recipes_layout_is_refused, redis_a_recipe_on_another_recipes_layout_is_refused;
    endpoints::run => zk_wrong_endpoints_fail_fast_with_a_typed_error,
        etcd_wrong_endpoints_fail_fast_with_a_typed_error, redis_wrong_endpoints_fail_fast_with_a_typed_error;
    lifecycle::run => zk_close_twice_and_use_after_close_have_typed_outcomes,
        etcd_close_twice_and_use_after_close_have_typed_outcomes, redis_close_twice_and_use_after_close_have_typed_outcomes;
    cli::run_all => zk_cli_bad_input_exits_64_saying_what_to_change,
        etcd_cli_bad_input_exits_64_saying_what_to_change, redis_cli_bad_input_exits_64_saying_what_to_change;
    misuse::run => zk_the_same_misuse_has_the_same_answer,
        etcd_the_same_misuse_has_the_same_answer, redis_the_same_misuse_has_the_same_answer;
}

macro_rules! on_pg {
    ($($area:ident :: $fun:ident => $pg:ident;)*) => {
        $(
            #[test]
            fn $pg() {
                own_servers();
                $area::$fun::<Pg>();
            }
        )*
    };
}

on_pg! {
    names::run => pg_bad_names_are_refused_before_anything_is_sent;
    durations::run => pg_durations_out_of_bounds_are_refused_and_extreme_waits_work;
    values::run => pg_oversized_values_and_fenced_writes_into_a_layout_are_refused;
    values::run_layouts => pg_a_recipe_on_another_recipes_layout_is_refused;
    endpoints::run => pg_wrong_endpoints_fail_fast_with_a_typed_error;
    lifecycle::run => pg_close_twice_and_use_after_close_have_typed_outcomes;
    cli::run_all => pg_cli_bad_input_exits_64_saying_what_to_change;
    misuse::run => pg_the_same_misuse_has_the_same_answer;
}
