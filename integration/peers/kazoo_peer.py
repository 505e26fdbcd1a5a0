"""A kazoo client driven over stdin/stdout, for interop tests.

Usage: /usr/bin/python3 -u kazoo_peer.py <connect string> <session timeout ms>

Run it with Debian's python3: python3-kazoo is installed for that one only.
Prints READY once connected, then answers one request per line with one
line: "OK [fields]" or "ERR <message>". Requests:

  lock <path> [wait_ms]   kazoo's Lock(path, identifier).acquire(), or with
                          timeout=wait_ms -> OK acquired | OK timeout
  lock-curator-aware <path> [wait_ms]
                          the same with extra_lock_patterns=["-lock-"]: the
                          lock also queues behind Curator's (and recipes')
                          `_c_<uuid>-lock-<seq>` nodes
  release                 release the held lock -> OK
  children <path>         -> OK <sorted, comma-separated children>
  exit                    release, stop the client -> OK, then exit

Only this protocol goes to stdout; kazoo logs to stderr.
"""

import logging
import os
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout

# kazoo's Lock queues only behind names matching one of its patterns
# (`__lock__` by default) followed by a 10-digit sequence.
CURATOR_PATTERNS = ["-lock-"]


class Peer:
    def __init__(self, client):
        self.client = client
        self.lock = None
        self.identifier = "kazoo-peer-%d" % os.getpid()

    def handle(self, words):
        op, args = words[0], words[1:]
        if op in ("lock", "lock-curator-aware"):
            need(op, args, 1, 2)
            if self.lock is not None:
                raise RuntimeError("already holds a lock (release first)")
            patterns = CURATOR_PATTERNS if op == "lock-curator-aware" else ()
            lock = self.client.Lock(
                args[0], self.identifier, extra_lock_patterns=patterns
            )
            timeout = int(args[1]) / 1000.0 if len(args) == 2 else None
            try:
                acquired = lock.acquire(blocking=True, timeout=timeout)
            except LockTimeout:
                acquired = False
            if not acquired:
                return "timeout"
            self.lock = lock
            return "acquired"
        if op == "release":
            need(op, args, 0, 0)
            if self.lock is None:
                raise RuntimeError("holds no lock")
            lock, self.lock = self.lock, None
            lock.release()
            return ""
        if op == "children":
            need(op, args, 1, 1)
            return ",".join(sorted(self.client.get_children(args[0])))
        if op == "exit":
            need(op, args, 0, 0)
            if self.lock is not None:
                self.lock.release()
                self.lock = None
            self.client.stop()
            self.client.close()
            return ""
        raise ValueError("unknown request %s" % op)


def need(op, args, lo, hi):
    if not lo <= len(args) <= hi:
        raise ValueError("%s takes %d..%d arguments" % (op, lo, hi))


def reply(line):
    sys.stdout.write(line.strip() + "\n")
    sys.stdout.flush()


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: kazoo_peer.py <connect string> <session timeout ms>\n")
        sys.exit(2)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s",
    )
    client = KazooClient(hosts=sys.argv[1], timeout=int(sys.argv[2]) / 1000.0)
    client.start(timeout=30)
    peer = Peer(client)
    reply("READY")
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            reply("OK " + peer.handle(words))
        except Exception as e:  # every failure is a reply, never a crash
            logging.exception("request %r failed", line.strip())
            reply("ERR %s: %s" % (type(e).__name__, str(e).replace("\n", " ")))
            continue
        if words[0] == "exit":
            break


if __name__ == "__main__":
    main()
