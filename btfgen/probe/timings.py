"""`--timings`: each stage's wall time, build and run."""

from __future__ import annotations

import time
from contextlib import contextmanager

from . import prog


class Timings:
    """Where the time goes: each stage's wall time, said on stderr as it ends when asked
    (--timings) as `PROG: time: STAGE: SECONDS s`, a line a benchmark can read."""

    def __init__(self, on: bool, out=None) -> None:
        self.on = on
        self.out = out
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str):
        start = time.perf_counter()
        yield  # a stage that failed is not timed: its error is what is said
        took = self.seconds[name] = time.perf_counter() - start
        if self.on:
            prog.say(f"time: {name}: {took:.6f} s", file=self.out, flush=True)
