"""Recordings of nested calls without BPF (synth's events): each thread calls a tree of
functions, entries and exits in the order a real thread makes them, threads interleaved."""

from __future__ import annotations

import random

import synth


def calls(descs, n: int, seed: int, order: str, threads=(100, 101, 102),
          fanout: int = 3, depth: int = 3) -> list[bytes]:
    """About n events: each thread in turn makes one top-level call, its callees `fanout` at
    each level down to `depth`, a thread's tree at a time interleaved with the others'."""
    rng = random.Random(seed)
    out, ns = [], [1000]

    def call(tid: int, level: int) -> None:
        d = descs[level % len(descs)]
        ns[0] += rng.randrange(1, 500)
        out.append(synth.event(d, 0, rng, ns[0], tid, 0, 0, order))
        if level < depth:
            for _ in range(rng.randrange(fanout + 1)):
                call(tid, level + 1)
        ns[0] += rng.randrange(1, 500)
        out.append(synth.event(d, 1, rng, ns[0], tid, 0, 0, order))

    while len(out) < n:
        for tid in threads:
            call(tid, 0)
    return out
