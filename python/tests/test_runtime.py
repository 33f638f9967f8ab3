"""The library's Go runtime as build.sh builds it: its monitor thread (sysmon)
keeps polling while the library is idle (the built-in default
GODEBUG=schedtrace=2147483647, LIB_GODEBUG in build.sh), so that a call
after an idle gap does not have to wake it; the host's GODEBUG still
overrides the default.

Each case runs in a fresh interpreter (the runtime reads its settings once,
when the library loads), makes one call into the library, then counts the
voluntary context switches of the process's other threads (the Go
runtime's: this interpreter starts none) over one idle second. A polling
monitor sleeps and wakes about every 10 ms, about 100 switches; a monitor
that sleeps until a call wakes it makes none. Linux only (/proc).
"""

import os
import subprocess
import sys
import textwrap
import unittest

import adprouter

IDLE_S = 1.0

PROBE = textwrap.dedent("""
    import os, sys, time
    sys.path[:0] = %r
    import adprouter
    router = adprouter.Router(dp_size=4)
    router.state_digest()  # the runtime is loaded and has run a call
    time.sleep(0.2)        # the monitor settles after the call

    def switches():
        total, me = 0, os.getpid()
        for tid in os.listdir("/proc/self/task"):
            if int(tid) == me:
                continue
            try:
                with open("/proc/self/task/%%s/status" %% tid) as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            total += int(line.split()[1])
            except FileNotFoundError:  # a thread that exited meanwhile
                pass
        return total

    before = switches()
    time.sleep(%r)
    print(switches() - before)
""")


def idle_switches(godebug):
    """The other threads' voluntary context switches over IDLE_S seconds of
    an idle library in a fresh interpreter, run with GODEBUG=godebug (None:
    unset)."""
    env = dict(os.environ)
    env.pop("GODEBUG", None)
    if godebug is not None:
        env["GODEBUG"] = godebug
    here = os.path.dirname(os.path.dirname(os.path.abspath(adprouter.__file__)))
    out = subprocess.run([sys.executable, "-c", PROBE % ([here], IDLE_S)], env=env, capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError("the probe failed (exit %d):\n%s" % (out.returncode, out.stderr))
    return int(out.stdout.split()[-1])


@unittest.skipUnless(os.path.isdir("/proc/self/task"), "needs Linux's /proc/self/task")
class MonitorTest(unittest.TestCase):
    def test_monitor_polls_by_default(self):
        # ~100 expected; 20 leaves room for a loaded machine's late wakes.
        n = idle_switches(None)
        self.assertGreaterEqual(n, 20, "the library's runtime monitor slept through %.1f s idle (%d wakes): "
                                "is build.sh's LIB_GODEBUG linked in (runtime.godebugDefault)?" % (IDLE_S, n))

    def test_other_settings_keep_the_default(self):
        # GODEBUG naming other settings leaves schedtrace at the built-in one.
        self.assertGreaterEqual(idle_switches("madvdontneed=1"), 20)

    def test_host_can_turn_it_off(self):
        # What the default changes: without it the monitor sleeps until a
        # call wakes it (GODEBUG=schedtrace=0, docs/performance.md).
        n = idle_switches("schedtrace=0")
        self.assertLessEqual(n, 5, "with GODEBUG=schedtrace=0 the runtime still woke %d times in %.1f s idle"
                             % (n, IDLE_S))


if __name__ == "__main__":
    unittest.main()
