//! What a worker holds, whichever lock recipe took it, and how a `multi`
//! request names its parts.

use std::time::Duration;

use recipes_core::store::{FencedLease, RwLockBackend};
use recipes_core::{
    Client, Error, FencedWrites, FencingToken, LockKind, LossSignal, MultiLockGuard, MutexGuard,
    RwLockReadGuard, RwLockWriteGuard,
};

use crate::{millis, usage};

/// What a worker holds, whichever lock recipe took it: the requests after
/// `lock`, `rwlock` and `multi` are the same.
pub(crate) trait Holding: std::any::Any {
    fn token(&self) -> FencingToken;
    fn holder(&self) -> String;
    fn lost(&self) -> &LossSignal;
    /// The name whose lease lapsed, for a multi-lock.
    fn lost_name(&self) -> Option<Option<String>> {
        None
    }
    /// `name:token` for every name, for a multi-lock.
    fn tokens(&self) -> Option<String> {
        None
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), Error>;
    fn release(self: Box<Self>) -> Result<(), Error>;
    fn as_any(&self) -> &dyn std::any::Any;
}

impl<L: FencedLease + FencedWrites> Holding for MutexGuard<L> {
    fn token(&self) -> FencingToken {
        MutexGuard::token(self)
    }
    fn holder(&self) -> String {
        MutexGuard::holder(self).to_owned()
    }
    fn lost(&self) -> &LossSignal {
        MutexGuard::lost(self)
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), Error> {
        MutexGuard::put(self, key, value)
    }
    fn release(self: Box<Self>) -> Result<(), Error> {
        MutexGuard::release(*self)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The same [`Holding`] for both sides of a read-write lock.
macro_rules! rw_holding {
    ($guard:ident) => {
        impl<B: RwLockBackend<Lease: FencedWrites>> Holding for $guard<B> {
            fn token(&self) -> FencingToken {
                $guard::token(self)
            }
            fn holder(&self) -> String {
                $guard::holder(self).to_owned()
            }
            fn lost(&self) -> &LossSignal {
                $guard::lost(self)
            }
            fn put(&self, key: &str, value: &[u8]) -> Result<(), Error> {
                $guard::put(self, key, value)
            }
            fn release(self: Box<Self>) -> Result<(), Error> {
                $guard::release(*self)
            }
            fn as_any(&self) -> &dyn std::any::Any {
                self
            }
        }
    };
}
rw_holding!(RwLockReadGuard);
rw_holding!(RwLockWriteGuard);

impl<C: Client> Holding for MultiLockGuard<C> {
    fn token(&self) -> FencingToken {
        self.tokens()[0].1
    }
    fn holder(&self) -> String {
        let first = self.tokens()[0].0;
        MultiLockGuard::holder(self, first)
            .unwrap_or_default()
            .to_owned()
    }
    fn lost(&self) -> &LossSignal {
        MultiLockGuard::lost(self)
    }
    fn lost_name(&self) -> Option<Option<String>> {
        Some(MultiLockGuard::lost_name(self))
    }
    fn tokens(&self) -> Option<String> {
        let tokens = MultiLockGuard::tokens(self);
        let parts: Vec<String> = tokens.iter().map(|(n, t)| format!("{n}:{t}")).collect();
        Some(parts.join(","))
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), Error> {
        let first = self.tokens()[0].0.to_owned();
        MultiLockGuard::put(self, &first, key, value)
    }
    fn release(self: Box<Self>) -> Result<(), Error> {
        MultiLockGuard::release(*self)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The parts of a `multi` request: `m:<name>`, `r:<name>`, `w:<name>`.
pub(crate) fn multi_parts(spec: &str) -> Result<Vec<(&str, LockKind)>, String> {
    spec.split(',')
        .map(|part| match part.split_once(':') {
            Some(("m", name)) => Ok((name, LockKind::Mutex)),
            Some(("r", name)) => Ok((name, LockKind::Read)),
            Some(("w", name)) => Ok((name, LockKind::Write)),
            _ => Err(usage("a multi part is m:<name>, r:<name> or w:<name>")),
        })
        .collect()
}

/// The optional `wait_ms` of an acquiring request.
pub(crate) fn wait_of(rest: &[&str], form: &str) -> Result<Option<Duration>, String> {
    match rest {
        [] => Ok(None),
        [ms] => Ok(Some(millis(ms, "wait_ms")?)),
        _ => Err(usage(form)),
    }
}
