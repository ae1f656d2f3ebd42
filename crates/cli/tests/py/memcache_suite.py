#!/usr/bin/env python3
"""Every memcached command Waverunner supports, through pymemcache (and a raw socket for
gat, gats and verbosity, which pymemcache 3.5.2 lacks): writes through one replica, reads
through every replica right after each acknowledged write.

Usage: memcache_suite.py PREFIX WRITE_PORT READ_PORT...

Exits 0 and prints "memcache suite passed: N checks" when every check holds; otherwise
prints the first failed check and exits 1.
"""

import socket
import sys
import time

from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError

HOST = "127.0.0.1"


class Failed(Exception):
    pass


class Suite:
    def __init__(self, prefix, wport, rports):
        self.prefix = prefix
        self.wport = wport
        self.w = self.client(wport)
        self.readers = [(p, self.client(p)) for p in rports]
        self.checks = 0

    @staticmethod
    def client(port):
        # default_noreply=False: storage commands wait for the reply (pymemcache's default
        # is noreply, which would make every check of a store vacuous).
        return Client((HOST, port), default_noreply=False, connect_timeout=5, timeout=15)

    def k(self, s):
        return self.prefix + s

    def eq(self, got, want, what):
        if got != want:
            raise Failed(f"{what}: got {got!r}, want {want!r}")
        self.checks += 1

    def everywhere(self, fn, want, what):
        for port, r in self.readers:
            self.eq(fn(r), want, f"{what} via port {port}")

    def raw(self, payload, want_end, timeout=10.0):
        """Sends payload on a fresh connection; reads until the reply ends with want_end."""
        with socket.create_connection((HOST, self.wport), timeout=timeout) as s:
            s.sendall(payload)
            out = b""
            deadline = time.monotonic() + timeout
            while not out.endswith(want_end):
                if time.monotonic() > deadline:
                    raise Failed(f"raw {payload!r}: no {want_end!r} in {out!r}")
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
            return out

    def run(self):
        w, k = self.w, self.k
        a, b, missing = k("a"), k("b"), k("missing")

        v = w.version()
        self.eq(v.startswith(b"waverunner"), True, f"version {v!r}")
        self.eq(w.flush_all(), True, "flush_all")
        self.everywhere(lambda r: r.get(a), None, "get after flush_all")

        # set, get, get_many, gets
        self.eq(w.set(a, b"1"), True, "set")
        self.everywhere(lambda r: r.get(a), b"1", "get")
        self.everywhere(lambda r: r.get_many([a, missing]), {a: b"1"}, "get_many")
        value, cas = w.gets(a)
        self.eq(value, b"1", "gets value")
        self.everywhere(lambda r: r.gets(a), (b"1", cas), "gets (the CAS unique agrees)")
        self.eq(w.set(k("flags"), b"f", expire=0), True, "set with expire=0")

        # add, replace
        self.eq(w.add(a, b"2"), False, "add over an existing key")
        self.eq(w.add(b, b"B"), True, "add a new key")
        self.everywhere(lambda r: r.get(b), b"B", "get after add")
        self.eq(w.replace(a, b"2"), True, "replace")
        self.eq(w.replace(missing, b"x"), False, "replace a missing key")
        self.everywhere(lambda r: r.get(a), b"2", "get after replace")
        self.everywhere(lambda r: r.get(missing), None, "replace must not create")

        # append, prepend
        self.eq(w.append(a, b"x"), True, "append")
        self.eq(w.prepend(a, b"y"), True, "prepend")
        self.eq(w.append(missing, b"x"), False, "append to a missing key")
        self.eq(w.prepend(missing, b"x"), False, "prepend to a missing key")
        self.everywhere(lambda r: r.get(a), b"y2x", "get after append and prepend")

        # cas
        value, cas = w.gets(a)
        self.eq(w.cas(a, b"c1", cas), True, "cas with the current unique")
        self.eq(w.cas(a, b"c2", cas), False, "cas with a stale unique (EXISTS)")
        self.eq(w.cas(missing, b"c", cas), None, "cas on a missing key (NOT_FOUND)")
        self.everywhere(lambda r: r.get(a), b"c1", "get after cas")
        _, cas2 = w.gets(a)
        self.eq(cas2 != cas, True, "a write changes the CAS unique")

        # delete
        self.eq(w.delete(a), True, "delete")
        self.eq(w.delete(a), False, "delete a missing key")
        self.everywhere(lambda r: r.get(a), None, "get after delete")

        # incr, decr
        n = k("n")
        self.eq(w.set(n, b"10"), True, "set a counter")
        self.eq(w.incr(n, 5), 15, "incr")
        self.eq(w.decr(n, 20), 0, "decr stops at 0")
        self.eq(w.incr(n, 7), 7, "incr")
        self.eq(w.incr(missing, 1), None, "incr a missing key (NOT_FOUND)")
        self.eq(w.decr(missing, 1), None, "decr a missing key (NOT_FOUND)")
        self.everywhere(lambda r: r.get(n), b"7", "get a counter")
        try:
            w.incr(b, 1)
            raise Failed("incr of a non-numeric value did not fail")
        except MemcacheClientError as e:
            self.eq("non-numeric" in str(e), True, f"incr of a non-numeric value: {e}")

        # touch
        t = k("t")
        self.eq(w.set(t, b"v"), True, "set")
        self.eq(w.touch(t, 100), True, "touch")
        self.eq(w.touch(missing, 100), False, "touch a missing key")
        self.everywhere(lambda r: r.get(t), b"v", "get after touch")

        # expiry in real time: a relative exptime of 1 s
        e = k("e")
        self.eq(w.set(e, b"v", expire=1), True, "set with expire=1")
        acked = time.monotonic()
        time.sleep(max(0.0, acked + 1.3 - time.monotonic()))
        self.everywhere(lambda r: r.get(e), None, "get 1.3 s after set with expire=1")

        # noreply
        nr = k("nr")
        self.eq(w.set(nr, b"v", noreply=True), True, "set noreply")
        self.eq(w.get(nr), b"v", "get after set noreply (same connection)")
        self.everywhere(lambda r: r.get(nr), b"v", "get after set noreply")
        w.incr(n, 3, noreply=True)
        self.eq(w.get(n), b"10", "get after incr noreply")
        w.delete(nr, noreply=True)
        self.eq(w.get(nr), None, "get after delete noreply")
        self.everywhere(lambda r: r.get(nr), None, "get after delete noreply")

        # stats
        st = w.stats()
        for field in (b"pid", b"version", b"curr_items"):
            self.eq(field in st, True, f"stats has {field!r}: {st!r}")

        # gat, gats, verbosity over a raw socket
        g = k("g").encode()
        out = self.raw(b"set " + g + b" 5 0 3\r\nabc\r\n", b"\r\n")
        self.eq(out, b"STORED\r\n", "raw set")
        out = self.raw(b"gat 100 " + g + b"\r\n", b"END\r\n")
        self.eq(out, b"VALUE " + g + b" 5 3\r\nabc\r\nEND\r\n", "gat")
        out = self.raw(b"gats 100 " + g + b"\r\n", b"END\r\n")
        head = out.split(b"\r\n")[0].split(b" ")
        self.eq(head[:4], [b"VALUE", g, b"5", b"3"], f"gats {out!r}")
        self.eq(head[4].isdigit() and len(head) == 5, True, f"gats has a CAS unique: {out!r}")
        self.eq(out.endswith(b"\r\nabc\r\nEND\r\n"), True, f"gats {out!r}")
        out = self.raw(b"gat 100 " + k("missing").encode() + b"\r\n", b"END\r\n")
        self.eq(out, b"END\r\n", "gat of a missing key")
        # gat with a negative exptime returns the item and expires it.
        out = self.raw(b"gat -1 " + g + b"\r\n", b"END\r\n")
        self.eq(out, b"VALUE " + g + b" 5 3\r\nabc\r\nEND\r\n", "gat -1")
        self.everywhere(lambda r: r.get(g.decode()), None, "get after gat -1")
        out = self.raw(b"verbosity 1\r\n", b"\r\n")
        self.eq(out, b"OK\r\n", "verbosity")
        # noreply: the next reply on the connection is the version's.
        out = self.raw(b"verbosity 1 noreply\r\nversion\r\n", b"\r\n")
        self.eq(out.startswith(b"VERSION waverunner"), True, f"verbosity noreply, version: {out!r}")

        # flush_all
        self.eq(w.flush_all(), True, "flush_all")
        for key in (b, n, t):
            self.everywhere(lambda r: r.get(key), None, f"get {key} after flush_all")

        # quit closes the connection; a new one works
        w.quit()
        w2 = self.client(self.wport)
        self.eq(w2.set(a, b"after-quit"), True, "set on a new connection after quit")
        self.everywhere(lambda r: r.get(a), b"after-quit", "get after quit")
        self.eq(w2.delete(a), True, "delete")
        w2.close()


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    s = Suite(sys.argv[1], int(sys.argv[2]), [int(p) for p in sys.argv[3:]])
    try:
        s.run()
    except Failed as e:
        print(f"FAILED after {s.checks} checks: {e}")
        return 1
    print(f"memcache suite passed: {s.checks} checks through port {s.wport}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
