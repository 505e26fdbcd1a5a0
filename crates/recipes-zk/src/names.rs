//! Node names: Curator's protected names, sequence suffixes and their order,
//! path validation.

use std::cmp::Ordering;

use recipes_core::{Error, Result, MAX_NAME_BYTES};

/// Curator's node name of a mutex's (and a selector's) contenders.
pub(crate) const LOCK: &str = "lock-";
/// Curator's node name of a latch's (and an election's) candidates.
pub(crate) const LATCH: &str = "latch-";
/// Curator's node name of a semaphore's permits.
pub(crate) const LEASE: &str = "lease-";
/// Curator's node name of a read-write lock's readers
/// (`InterProcessReadWriteLock`).
pub(crate) const READ: &str = "__READ__";
/// Curator's node name of a read-write lock's writers; one sequence for
/// both sides.
pub(crate) const WRITE: &str = "__WRIT__";

/// The node names of one recipe's layout: a read-write lock's readers and
/// writers share a folder and a queue; every other recipe has one name.
pub(crate) fn layout_names(lock_name: &'static str) -> &'static [&'static str] {
    match lock_name {
        READ | WRITE => &[READ, WRITE],
        LOCK => &[LOCK],
        LATCH => &[LATCH],
        _ => &[LEASE],
    }
}

/// Whether `child` is a contender of the layout `lock_name` belongs to
/// (for a read-write lock: a reader or a writer).
pub(crate) fn in_layout(child: &str, lock_name: &'static str) -> bool {
    layout_names(lock_name)
        .iter()
        .any(|l| is_contender_of(child, l))
}

/// Curator's prefix of protected (guid) node names.
pub(crate) const PROTECTED_PREFIX: &str = "_c_";

/// Check a recipe's path, saying what to change when it is unusable.
pub(crate) fn validate_path(path: &str) -> Result<()> {
    let shown = recipes_core::store::quote(path);
    let bad = |why: &str| Err(Error::invalid(format!("ZooKeeper path {shown} {why}")));
    if path.len() > MAX_NAME_BYTES {
        return bad(&format!(
            "is {} bytes long; names and keys are at most {MAX_NAME_BYTES} bytes on every \
             store (a path is sent with every request): use at most {MAX_NAME_BYTES} bytes",
            path.len()
        ));
    }
    if path.is_empty() {
        return bad("is empty; give an absolute path such as /locks/nightly-report");
    }
    if !path.starts_with('/') {
        return bad("must start with '/', as in /locks/nightly-report");
    }
    if path == "/" {
        return bad("is the root; give a path below it, such as /locks/nightly-report");
    }
    if path.ends_with('/') {
        return bad("must not end with '/'");
    }
    if path == "/zookeeper" || path.starts_with("/zookeeper/") {
        return bad("is under /zookeeper, which the server reserves; choose another path");
    }
    for component in path[1..].split('/') {
        match component {
            "" => return bad("has an empty component ('//')"),
            "." | ".." => {
                return bad("has a '.' or '..' component; ZooKeeper paths are not relative")
            }
            _ => {}
        }
    }
    if let Some(c) = path.chars().find(|&c| forbidden_char(c)) {
        return Err(Error::invalid(format!(
            "ZooKeeper path {shown} contains the character {c:?} (U+{:04X}), which ZooKeeper \
             refuses; use printable characters",
            c as u32
        )));
    }
    Ok(())
}

/// The characters ZooKeeper's `PathUtils.validatePath` refuses, and those
/// above U+FFFF, which its Java strings hold as surrogate pairs it refuses.
fn forbidden_char(c: char) -> bool {
    c as u32 > 0xFFFF
        || matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{e000}'..='\u{f8ff}'
        | '\u{fff0}'..='\u{ffff}')
}

/// A fresh random UUID (version 4) for a protected name.
pub(crate) fn fresh_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The protected node-name prefix Curator uses: `_c_<uuid>-<lock_name>`,
/// to which the server appends the sequence.
pub(crate) fn protected_prefix(uuid: &str, lock_name: &str) -> String {
    format!("{PROTECTED_PREFIX}{uuid}-{lock_name}")
}

/// The node that takes the place of the writer node `writer` (a path) at
/// a downgrade: `<dir>/_c_<uuid>-__READ__` followed by the writer's own
/// sequence, as the server formatted it. Curator sorts a read-write lock's
/// nodes by what follows the marker and we by the sequence suffix, so it
/// sorts exactly where the writer did. `None` for a path that is no
/// writer's node.
pub(crate) fn reader_in_place_of(writer: &str, uuid: &str) -> Option<String> {
    let (dir, name) = writer.rsplit_once('/')?;
    let at = name.rfind(WRITE)?;
    let seq = &name[at + WRITE.len()..];
    (sequence_of(name).is_some() && seq.len() >= 10)
        .then(|| format!("{dir}/{}{seq}", protected_prefix(uuid, READ)))
}

/// The sequence ZooKeeper appended to a sequential node's name, formatted
/// as `%010d`: ten digits, or after the parent's counter wrapped, a minus
/// sign and ten digits (down to -1000000000) or a minus sign and nine. Works
/// for any recipe's names (Curator's `…-lock-0000000007`, kazoo's
/// `…__lock__0000000007`): a minus sign right after the name's own
/// separator (`-` or `_`) is the number's sign. `None` for a name with no
/// such suffix.
pub(crate) fn sequence_of(name: &str) -> Option<i32> {
    before_sequence(name).and_then(|before| name[before.len()..].parse().ok())
}

/// The part of a sequential node's name before its sequence (see
/// [`sequence_of`]); `None` for a name with no sequence suffix.
fn before_sequence(name: &str) -> Option<&str> {
    let b = name.as_bytes();
    let n = b.len();
    let digits = |from: usize| b[from..].iter().all(u8::is_ascii_digit);
    if n >= 10 && digits(n - 10) {
        let signed = n >= 12 && b[n - 11] == b'-' && matches!(b[n - 12], b'-' | b'_');
        return Some(&name[..n - if signed { 11 } else { 10 }]);
    }
    if n >= 10 && b[n - 10] == b'-' && digits(n - 9) {
        return Some(&name[..n - 10]);
    }
    None
}

/// Whether `child` is a contender of a recipe whose nodes are named
/// `…<lock_name><seq>`: Curator's names (`_c_<uuid>-lock-<seq>`,
/// `lock-<seq>`) and, for locks, kazoo's `<uuid>__lock__<seq>`. Anything
/// else — a nested lock's folder, an unrelated `job-0000000000` — never
/// counts.
pub(crate) fn is_contender_of(child: &str, lock_name: &str) -> bool {
    before_sequence(child).is_some_and(|before| {
        before.ends_with(lock_name) || (lock_name == LOCK && before.ends_with("__lock__"))
    })
}

/// Refuse `dir` if its `children` hold another recipe's layout than that
/// of a recipe whose nodes are named `…<lock_name><seq>` (`None`: the
/// semaphore's own `<path>`, whose `locks` and `leases` are its own):
/// another recipe's nodes. Unrelated children never count; nor do `locks`
/// and `leases` here: they are a semaphore's only when the folder stores a
/// size ([`has_semaphore_folders`], checked by the driver).
pub(crate) fn own_layout(
    dir: &str,
    children: &[String],
    lock_name: Option<&'static str>,
) -> Result<()> {
    let layouts = [
        (LOCK, "a mutex's or leader selector's …-lock-N nodes"),
        (LATCH, "an election's or leader latch's …-latch-N nodes"),
        (LEASE, "a semaphore's …-lease-N permits"),
        (
            READ,
            "a read-write lock's …-__READ__N and …-__WRIT__N nodes",
        ),
    ];
    let theirs = children.iter().find_map(|c| {
        layouts
            .iter()
            .find(|(l, _)| {
                lock_name.is_none_or(|ours| !layout_names(ours).contains(l)) && in_layout(c, l)
            })
            .map(|(_, what)| *what)
    });
    theirs.map_or(Ok(()), |theirs| Err(layout_refused(dir, theirs)))
}

fn layout_refused(dir: &str, theirs: &str) -> Error {
    Error::invalid(format!(
        "{} holds another recipe's layout ({theirs}): open it with that recipe, or choose \
         another name",
        recipes_core::store::quote(dir)
    ))
}

/// Whether `children` hold a folder named as a semaphore's own: `dir` is
/// then a semaphore's node if it stores a size ([`semaphore_size`]) — and
/// merely a parent of a lock named `locks` or `leases` if not.
pub(crate) fn has_semaphore_folders(children: &[String]) -> bool {
    children.iter().any(|c| c == "locks" || c == "leases")
}

/// `dir` is a semaphore's node: a lock or election there is refused.
pub(crate) fn semaphore_layout(dir: &str) -> Error {
    layout_refused(dir, "a semaphore's locks and leases folders")
}

/// The semaphore whose own folders (`<sem>/locks`: its internal mutex,
/// `<sem>/leases`: its permits) `path` would be, if it is one of them.
pub(crate) fn enclosing_semaphore(path: &str) -> Option<&str> {
    let (semaphore, last) = path.rsplit_once('/')?;
    (!semaphore.is_empty() && matches!(last, "locks" | "leases")).then_some(semaphore)
}

/// The size a semaphore's node stores as its data (decimal), if `data` is
/// one.
pub(crate) fn semaphore_size(data: &[u8]) -> Option<u32> {
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}

/// A lock or election at `path` would be inside the semaphore
/// `semaphore`'s folders, whose node holds its `size`.
pub(crate) fn inside_semaphore(path: &str, semaphore: &str, size: u32) -> Error {
    Error::invalid(format!(
        "the ZooKeeper name {} is part of the semaphore {} (its node holds its size, {size}): \
         a lock or election there would join the semaphore's own queue; choose a name \
         outside it",
        recipes_core::store::quote(path),
        recipes_core::store::quote(semaphore),
    ))
}

/// Contenders in queue order: the children with a sequence suffix, ordered
/// by serial-number arithmetic around `anchor` (our own sequence), so the
/// wrap of the parent's counter from 2147483647 to -2147483648 keeps the
/// order. Correct while all contenders lie within 2^31 creations of us.
pub(crate) fn queue_order(children: &[String], anchor: i32) -> Vec<(i32, String)> {
    let mut queue: Vec<(i32, String)> = children
        .iter()
        .filter_map(|c| sequence_of(c).map(|s| (s, c.clone())))
        .collect();
    queue.sort_by(|(a, na), (b, nb)| serial_cmp(*a, *b, anchor).then_with(|| na.cmp(nb)));
    queue
}

/// Contenders in queue order as seen by an observer with no node of its
/// own: anchored at the lowest sequence present. While all contenders lie
/// within 2^31 creations of each other, any present sequence as the anchor
/// gives the order each contender computes around its own.
pub(crate) fn observed_order(children: &[String]) -> Vec<(i32, String)> {
    let anchor = children.iter().filter_map(|c| sequence_of(c)).min();
    queue_order(children, anchor.unwrap_or(0))
}

fn serial_cmp(a: i32, b: i32, anchor: i32) -> Ordering {
    a.wrapping_sub(anchor).cmp(&b.wrapping_sub(anchor))
}

/// Whether `child` is a node we created with `uuid` (protected recovery).
pub(crate) fn is_ours(child: &str, uuid: &str) -> bool {
    child.starts_with(PROTECTED_PREFIX) && child[PROTECTED_PREFIX.len()..].starts_with(uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_parse_from_any_recipe_layout() {
        assert_eq!(sequence_of("_c_x-lock-0000000007"), Some(7));
        assert_eq!(sequence_of("abc__lock__0000000042"), Some(42));
        assert_eq!(sequence_of("_c_x-latch-2147483647"), Some(i32::MAX));
        assert_eq!(sequence_of("_c_x-lock--000000001"), Some(-1));
        assert_eq!(sequence_of("_c_x-lock--2147483648"), Some(i32::MIN));
        assert_eq!(sequence_of("_c_x-lock--1000000000"), Some(-1_000_000_000));
        assert_eq!(sequence_of("abc__lock__-2147483647"), Some(-2_147_483_647));
        assert_eq!(sequence_of("abc__lock__-000000002"), Some(-2));
        assert_eq!(sequence_of("_c_x-lock-2147483648"), None, "beyond i32");
        assert_eq!(sequence_of("locks"), None);
        assert_eq!(sequence_of("leases"), None);
        assert_eq!(sequence_of("lock-00000x0001"), None);
    }

    /// What `recipes status` lists: the order every contender's own
    /// `queue_order` gives, across the counter's wrap and layouts (a name
    /// with no sequence, such as `locks`, is no contender).
    #[test]
    fn an_observer_sees_the_order_every_contender_sees_across_the_wrap() {
        let names: Vec<String> = [
            "_c_d-lock--2147483646",
            "x__lock__2147483647",
            "_c_a-lock-2147483645",
            "_c_c-lock--2147483648",
            "_c_e-lock--000000007",
            "locks",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let seen = observed_order(&names);
        let order: Vec<&str> = seen.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(
            order,
            [
                "_c_a-lock-2147483645",
                "x__lock__2147483647",
                "_c_c-lock--2147483648",
                "_c_d-lock--2147483646",
                "_c_e-lock--000000007",
            ]
        );
        for (ours, _) in &seen {
            assert_eq!(queue_order(&names, *ours), seen, "around {ours}");
        }
    }

    #[test]
    fn a_downgraded_reader_keeps_the_writers_sequence() {
        let writer = "/a/rw/_c_1111-__WRIT__0000000042";
        let reader = reader_in_place_of(writer, "2222").unwrap();
        assert_eq!(reader, "/a/rw/_c_2222-__READ__0000000042");
        assert_eq!(sequence_of(&reader[6..]), sequence_of(&writer[6..]));
        assert_eq!(
            reader_in_place_of("/rw/_c_1-__WRIT__-000000002", "3").as_deref(),
            Some("/rw/_c_3-__READ__-000000002")
        );
        assert_eq!(reader_in_place_of("/rw/_c_1-__READ__0000000001", "3"), None);
        assert_eq!(reader_in_place_of("/rw/_c_1-lock-0000000001", "3"), None);
    }

    #[test]
    fn each_layout_refuses_the_others_and_a_read_write_lock_is_one_layout() {
        let rw: Vec<String> = ["_c_a-__READ__0000000001", "_c_b-__WRIT__0000000002"]
            .map(String::from)
            .to_vec();
        assert!(own_layout("/rw", &rw, Some(READ)).is_ok());
        assert!(own_layout("/rw", &rw, Some(WRITE)).is_ok());
        for other in [LOCK, LATCH, LEASE] {
            let refused = own_layout("/rw", &rw, Some(other)).unwrap_err();
            assert!(refused.to_string().contains("__READ__"), "{refused}");
        }
        assert!(own_layout("/rw", &rw, None).is_err(), "a semaphore's path");
        let mutex = vec!["_c_c-lock-0000000003".to_owned()];
        assert!(own_layout("/m", &mutex, Some(WRITE)).is_err());
        assert!(own_layout("/m", &mutex, Some(READ)).is_err());
        // A semaphore's folders are told by its node's size (driver.rs).
        let semaphore = vec!["locks".to_owned(), "leases".to_owned()];
        assert!(has_semaphore_folders(&semaphore));
        assert!(!has_semaphore_folders(&mutex));
        assert!(in_layout("_c_a-__READ__0000000001", WRITE));
        assert!(!in_layout("_c_a-__READ__0000000001", LOCK));
    }

    #[test]
    fn a_semaphores_own_folders_are_found_by_name_and_size() {
        assert_eq!(enclosing_semaphore("/s/locks"), Some("/s"));
        assert_eq!(enclosing_semaphore("/a/s/leases"), Some("/a/s"));
        assert_eq!(enclosing_semaphore("/s/other"), None);
        assert_eq!(enclosing_semaphore("/locks"), None);
        assert_eq!(semaphore_size(b"2"), Some(2));
        assert_eq!(semaphore_size(b""), None);
        assert_eq!(semaphore_size(b"x"), None);
    }

    #[test]
    fn only_the_recipes_own_names_are_contenders_and_ours_is_found() {
        let ours = "_c_0f0e0d0c-0b0a-4908-8706-050403020100-lock-0000000007";
        assert!(is_contender_of(ours, "lock-"));
        assert!(is_contender_of("lock-0000000003", "lock-"));
        assert!(is_contender_of("a1b2__lock__0000000003", "lock-"));
        assert!(is_contender_of("_c_x-lock--2147483648", "lock-"));
        assert!(is_contender_of("_c_x-latch-0000000001", "latch-"));
        for other in [
            "job-0000000000",
            "_c_x-latch-0000000001",
            "leases",
            "config",
        ] {
            assert!(!is_contender_of(other, "lock-"), "{other}");
        }
        assert!(!is_contender_of(ours, "latch-"));
        let p = protected_prefix("1234", "lock-");
        assert_eq!(p, "_c_1234-lock-");
        assert!(is_ours("_c_1234-lock-0000000001", "1234"));
        assert!(!is_ours("_c_9999-lock-0000000001", "1234"));
        assert!(!is_ours("x__lock__0000000001", "1234"));
    }
}
