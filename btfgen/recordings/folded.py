"""A recording's calls as folded stacks (`btfgen decode --format folded`), which flamegraph.pl,
speedscope and inferno read: a line `THREAD;CALLER;...;CALL NS` a stack, NS the nanoseconds
spent in CALL itself (its time less its exited callees'), per thread: the root frame is the
thread (`comm [tid]`), then the traced calls nested as they were open, callers first.

Only time measured between an entry and its exit is weighed. A call without its exit adds no
time of its own (none is known): it is in the stacks of its callees that exited, and one line
of weight 0 names it `NAME [no exit: WHY]` where it was open, so the file says it. An exit
without its entry is left out (the closing line counts it).

Streaming: lines are summed by stack up to STACKS distinct stacks, then written and summed
again, so a stack may be written more than once; the readers add the weights of equal stacks.
Where a recording holds the stacks the calls were made from (--stack), they are put between the
thread and the outermost traced call (Folded.root): its callers, outermost first, each named by
its function (`main`, not `main+0xf (prog)`: a flame graph merges a function's call sites), a
frame not named by its frame text (its address and why), and `[stack likely cut]` outermost
where the user stack was likely cut.
"""

from __future__ import annotations

from btfgen.recordings.callwalk import Call, Export

STACKS = 1 << 16  # distinct stacks summed before they are written


def frame(name: str) -> str:
    """A frame as the format can hold it: no `;` (the separator), no line end."""
    return name.replace(";", ":").replace("\n", " ").replace("\r", " ")


CUT = "[stack likely cut]"


class Folded(Export):
    stacks = True

    def __init__(self, out) -> None:
        self.out = out
        self.threads: dict[int, str] = {}  # tid -> its root frame
        self.frames: dict[str, str] = {}  # name -> its frame
        self.weights: dict[str, int] = {}

    def begin(self) -> None:
        pass

    def end(self) -> None:
        self.flush()

    def flush(self) -> None:
        if self.weights:
            self.out.write("".join(f"{stack} {ns}\n" for stack, ns in self.weights.items()))
            self.weights.clear()

    def thread(self, tgid: int, tid: int, comm: str) -> None:
        self.threads[tid] = frame(f"{comm} [{tid}]")

    def root(self, call: Call) -> str:
        """The frames below a thread's outermost traced call: its thread, then the call's
        callers as recorded (--stack)."""
        thread = self.threads[call.tid]
        if not call.stack:
            return thread
        frames = [*call.stack.get("kernel", ()), *call.stack.get("user", ())]
        if frames and frames[0].symbol == call.name:
            frames = frames[1:]  # the call itself: its own frame follows
        names = [self._frame(f.symbol if f.symbol is not None else f.text)
                 for f in reversed(frames)]
        if call.stack.get("user_cut"):
            names.insert(0, CUT)
        return ";".join([thread, *names])

    def _frame(self, name: str) -> str:
        got = self.frames.get(name)
        if got is None:
            got = self.frames[name] = frame(name)
        return got

    def entered(self, call: Call, parent) -> None:
        call.path = (parent.path if parent is not None else self.root(call)) + ";" + \
            self._frame(call.name)

    def exited(self, call: Call, ns: int, text) -> None:
        self._add(call.path, ns - call.ns - call.inner)

    def unended(self, call: Call, why: str) -> None:
        self._add(call.path + frame(f" [no exit: {why}]"), 0)

    def _add(self, stack: str, ns: int) -> None:
        weights = self.weights
        weights[stack] = weights.get(stack, 0) + ns
        if len(weights) >= STACKS:
            self.flush()
