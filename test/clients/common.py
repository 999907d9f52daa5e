"""Helpers shared by the client checkers: check() and Example, a child
process whose output lines are collected (and echoed with a label)."""
import re
import subprocess
import threading
import time

failures = []


def check(cond, what):
    if cond:
        print(f"  ok: {what}", flush=True)
    else:
        print(f"  FAILED: {what}", flush=True)
        failures.append(what)
    return cond


class Example:
    """One run of the example program; collects its output lines."""

    def __init__(self, argv, label):
        self.label = label
        self.lines = []
        self.cond = threading.Condition()
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            print(f"    [{self.label} +{time.monotonic() - self.t0:5.2f}s] {line}",
                  flush=True)
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)	# end of output
            self.cond.notify_all()

    def wait_line(self, pattern, timeout):
        """First output line matching pattern (a re.Match), or None."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines:
                    if line is not None:
                        m = rx.search(line)
                        if m:
                            return m
                if None in self.lines:
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def wait(self, timeout):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            print(f"    [{self.label}] killed after {timeout} s", flush=True)
            rc = "timeout"
        self.reader.join(5)
        return rc

    def count(self, pattern):
        rx = re.compile(pattern)
        return sum(1 for l in self.lines if l is not None and rx.search(l))

    def output(self):
        return [l for l in self.lines if l is not None]
