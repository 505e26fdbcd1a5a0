//! The client's read guards by lock name ([`Readers`]), for the refusal
//! of a write that would wait for the calling thread's own read guard.

use std::thread::ThreadId;

use crate::runtime::Readers;

/// A read guard in its client's bookkeeping, under its lock's name: the
/// thread that took it and the handle it was taken through (the handle's
/// address, stable while a guard of it lives).
#[derive(PartialEq, Eq)]
pub(crate) struct Reading {
    pub(super) thread: ThreadId,
    pub(super) handle: usize,
}

/// Note a read guard of `name`.
pub(super) fn add(readers: &Readers, name: &str, reading: Reading) {
    let mut readers = readers.lock();
    match readers.get_mut(name) {
        Some(of_name) => of_name.push(reading),
        None => {
            readers.insert(name.to_owned(), vec![reading]);
        }
    }
}

/// Forget a read guard of `name` (one of its entries, if several match).
pub(super) fn remove(readers: &Readers, name: &str, reading: &Reading) {
    let mut readers = readers.lock();
    let Some(of_name) = readers.get_mut(name) else {
        return;
    };
    if let Some(i) = of_name.iter().position(|r| r == reading) {
        of_name.swap_remove(i);
    }
    if of_name.is_empty() {
        readers.remove(name);
    }
}

/// Whether a write of `name` by thread `me` through handle `handle` would
/// wait for a read guard of its own: one taken through this handle, or,
/// for an `untimed` write, through any.
pub(super) fn blocks(
    readers: &Readers,
    name: &str,
    me: ThreadId,
    handle: usize,
    untimed: bool,
) -> bool {
    let readers = readers.lock();
    readers.get(name).is_some_and(|of_name| {
        of_name
            .iter()
            .any(|r| r.thread == me && (r.handle == handle || untimed))
    })
}
