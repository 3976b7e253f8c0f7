"""harkd's memory goes back to the kernel every --memory-release-secs.

The release build links jemalloc and tells it to keep freed pages for
reuse (src/harkd.c, malloc_conf): its default returns a few at a time all
the time, which cost the neural rounds a page fault storm every round
(bench/RESULTS.md, 2026-11-28 evening). Instead harkd returns them all at
once every --memory-release-secs. Real sockets against the real harkd:
three 40 MiB request bodies at once make it hold ~120 MiB; with the
release every 2 s its RSS is back near where it started within seconds,
and with 0 (never) the pages stay, as the flag says. Skipped on builds
without jemalloc (the sanitizers bring their own allocator).
"""
import json
import threading
import time
import unittest

from harness import MODELS, Harkd, simple_request

MIB = 1 << 20
BODY = 40 * MIB


def uses_jemalloc(pid):
    with open(f"/proc/{pid}/maps") as f:
        return "libjemalloc" in f.read()


def padded_infer(size):
    doc = json.dumps(simple_request(list(range(16)), [1] * 16)).encode()
    return doc + b" " * (size - len(doc))


class MemoryRelease(unittest.TestCase):

    def start(self, secs):
        server = Harkd(MODELS, ("--memory-release-secs", str(secs)))
        self.addCleanup(server.stop)
        if not uses_jemalloc(server.proc.pid):
            self.skipTest("this harkd is not linked with jemalloc (a sanitizer build)")
        return server

    def load(self, server):
        """Three 40 MiB bodies at once, each answered 200; the highest RSS
        seen while they ran (KiB)."""
        body, peak, statuses = padded_infer(BODY), [server.rss_kib()], []
        done = threading.Event()

        def post():
            status, _, _ = server.request("POST", "/v2/models/simple/infer", body,
                                       {"Content-Type": "application/json"})
            statuses.append(status)

        threads = [threading.Thread(target=post) for _ in range(3)]
        for t in threads:
            t.start()

        def sample():
            while not done.is_set():
                peak.append(server.rss_kib())
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        for t in threads:
            t.join()
        done.set()
        sampler.join()
        self.assertEqual(statuses, [200, 200, 200])
        return max(peak)

    def settle(self, server, seconds):
        """RSS (KiB) after `seconds`, sampled; the lowest seen."""
        low, deadline = server.rss_kib(), time.monotonic() + seconds
        while time.monotonic() < deadline:
            low = min(low, server.rss_kib())
            time.sleep(0.1)
        return low

    def test_freed_memory_goes_back_every_period(self):
        server = self.start(2)
        base = self.settle(server, 3)  # past a release: what start-up freed is gone
        peak = self.load(server)
        self.assertGreater(peak - base, 60 * 1024, (base, peak))
        after = self.settle(server, 6)  # at least two releases
        print(f"\n--memory-release-secs 2: RSS {base >> 10} -> peak {peak >> 10} -> "
              f"{after >> 10} MiB")
        self.assertLess(after - base, 30 * 1024, (base, peak, after))

    def test_zero_keeps_the_pages_for_reuse(self):
        server = self.start(0)
        base = self.settle(server, 1)
        peak = self.load(server)
        after = self.settle(server, 4)
        print(f"\n--memory-release-secs 0: RSS {base >> 10} -> peak {peak >> 10} -> "
              f"{after >> 10} MiB")
        self.assertGreater(after - base, 60 * 1024, (base, peak, after))


if __name__ == "__main__":
    unittest.main()
