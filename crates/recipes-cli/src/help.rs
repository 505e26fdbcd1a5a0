//! The help texts: examples, exit statuses, what CMD gets.

pub const MAIN_EXAMPLES: &str = "\
Examples:
  # Run the nightly report on at most one machine at a time:
  recipes --zk 127.0.0.1:2181 lock /locks/nightly-report -- ./report.sh

  # At most 3 concurrent backups, give up after a minute of waiting:
  RECIPES_ETCD=127.0.0.1:2379 recipes semaphore /sem/backup --permits 3 --wait 1m -- ./backup.sh

Exit status:
  CMD's own   CMD ran and exited (128+n if signal n killed it)
  64          usage: a bad option, name, duration or CMD; fix the command line
  69          the store could not be reached or failed; check the address
  71          CMD's keeper process could not be started
  74          stdout could not be written (a closed pipe, a full disk)
  75          not acquired within --wait / at once (--conflict-exit-code)
  76          the lease was lost before or while CMD ran (--lost-exit-code)
  77          the store refused the credentials or the operation
  78          TLS does not fit the server (CA, client certificate, TLS port)
  126, 127    CMD found but not executable, CMD not found";

pub const LOCK_EXAMPLES: &str = "\
Examples:
  recipes --zk 127.0.0.1:2181 --ttl 10s lock /locks/nightly-report --wait 30s -- \\
      sh -c 'echo \"fence $RECIPES_FENCE\"; ./report.sh --fence \"$RECIPES_FENCE\"'
  recipes --etcd 127.0.0.1:2379 lock --read /cache -- ./serve-from-cache.sh
  recipes --etcd 127.0.0.1:2379 lock --write /cache -- ./rebuild-cache.sh
  recipes --pg postgres://db/app lock /accounts/1 /accounts/2 -- ./transfer.sh

A plain NAME is a mutex; --read NAME and --write NAME take a side of the
read-write lock NAME (many readers at once, or one writer; fair: a reader
waits for the writers queued before it). Several names are taken all or
nothing, always in one order (by name), so two commands over the same
names never deadlock each other; each of --read and --write takes one name
and may be repeated.

CMD gets RECIPES_FENCE (the decimal fencing token: pass it with every write
so the resource can refuse a stale holder), RECIPES_NAME and RECIPES_HOLDER
(the lock node or key). If the lease is at risk (not renewed, and its
deadline min(--grace, TTL/5) away) or lost while CMD runs, CMD and every
process it started (in any process group or session) get SIGTERM; then
SIGKILL once the lease is lost (its deadline, just before the earliest
moment the store may give it away) or --grace ends, whichever comes first;
recipes exits 76 once none of them is left. Processes CMD leaves running
when it exits are stopped the same way before the release, and a keeper
process kills them all if recipes itself is killed (RECIPES_CGROUP=off: no
cgroup of CMD's own, the keeper's process tree only).

With several names CMD also gets RECIPES_LOCKS (how many) and, for each
name in command-line order from 1, RECIPES_NAME_<i>, RECIPES_FENCE_<i> and
RECIPES_HOLDER_<i>; RECIPES_NAME, RECIPES_FENCE and RECIPES_HOLDER are the
first name's. Losing any one of the locks stops CMD as above.";

pub const SEMAPHORE_EXAMPLES: &str = "\
Example:
  recipes --etcd 127.0.0.1:2379 semaphore /sem/backup --permits 3 --no-wait -- ./backup.sh

CMD gets RECIPES_PERMIT and RECIPES_HOLDER (the permit's node or key) and
RECIPES_NAME, but no RECIPES_FENCE: permits are concurrent and have no
shared order. Every holder must ask for the same --permits.";

pub const ELECT_EXAMPLES: &str = "\
Example:
  recipes --zk 127.0.0.1:2181 --id web-1 elect /elections/scheduler -- ./scheduler

Waits until leader of the election NAME, with --id as the value (ZooKeeper:
Curator's LeaderLatch layout; etcd: etcd's concurrency layout), runs CMD with
RECIPES_FENCE while leading, resigns when CMD exits.";

pub const STATUS_EXAMPLES: &str = "\
Example:
  recipes --zk 127.0.0.1:2181 status /locks/nightly-report --json
  recipes --zk 127.0.0.1:2181 status /elections/scheduler --watch

Lists the contenders on NAME in queue order: the first (for a semaphore, the
first N; for a read-write lock, each reader up to the first writer, or that
writer when it is first) hold it, the others wait; a read-write lock's
contenders show as readers and writers. ZooKeeper shows each node's czxid, which
is the fencing token of a mutex or latch holder; etcd shows each key's
create_revision (an etcd mutex's fence is the revision of the read that
confirmed it, which the store does not keep); PostgreSQL shows each row's
seq and the holder's fence (the name's counter, for a holder in either
mode: a --pg-mode session holder shows as NAME/backend-PID); Redis shows
each entry's place in the queue and the holder's fence (the name's fence
key).

--watch keeps showing it: redrawn on every change the store's watches
report (under a terminal, with how long NAME has had no holder), until
Ctrl-C; with --json, one object per change, each with no_holder_for_ms.";

pub const DOCTOR_EXAMPLES: &str = "\
Examples:
  recipes --redis redis://cache:6379 doctor
  recipes --pg postgres://app@db/app --pg-mode session --ttl 30s doctor --json
  recipes --zk zk1:2181,zk2:2181,zk3:2181 --ttl 20s doctor --strict

Connects as the application would (the same store flags, TLS, --user and
--ttl), reads what it can without admin rights, takes a lock of its own on
/recipes-doctor/lock, fences and releases it, and checks that no holder or
waiter was left (the store keeps the name's fence counter, by design). A check it could not make says so (skip) and which right would let it.

Exit status: 0 when nothing fails, 2 when a check fails, 1 when one warns
and --strict is given; as the other commands when the options are unusable
(64) or stdout cannot be written (74).";
