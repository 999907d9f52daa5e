"""The Python examples' log(): each line goes out in one write.

queue_fleet.py's 60 worker threads once wrote two lines run together
("released=trueworker 29 job 1: ..."), and the queue-fleet suite, which
counts the lines, failed: print() writes a line's text and its newline in
separate calls, and another thread's line can come between them.  Here
threads log through every example's log() into a stdout that records each
write: every write must be one whole line.  Usage: check_example_logs.py DIR
"""
import importlib.util
import sys
import threading

THREADS, LINES = 8, 200


class Recorder:
    def __init__(self):
        self.writes = []
        self.lock = threading.Lock()

    def write(self, s):
        with self.lock:
            self.writes.append(s)
        return len(s)

    def flush(self):
        pass


def check(path):
    spec = importlib.util.spec_from_file_location("example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = Recorder()
    saved, sys.stdout = sys.stdout, out
    try:
        threads = [threading.Thread(target=lambda n=n: [mod.log(f"thread {n} line {i}:", "done=true")
                                                       for i in range(LINES)])
                   for n in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.stdout = saved
    whole = [w for w in out.writes if w.endswith("\n") and w.count("\n") == 1]
    ok = len(whole) == len(out.writes) == THREADS * LINES
    print(f"  {'ok' if ok else 'FAILED'}: {path}: {len(whole)} of {len(out.writes)} writes a whole line"
          f" ({THREADS * LINES} lines logged)")
    return ok


if __name__ == "__main__":
    d = sys.argv[1]
    results = [check(f"{d}/{name}") for name in ("queue_fleet.py", "leader.py", "lease_worker.py")]
    sys.exit(0 if all(results) else 1)
