"""The kernel's own argument fetcher on many functions, set up in the guest by Debian's python3
(standard library only): for every function of a list that ftrace can attach to, one fprobe event
at its return that carries both the arguments (`$arg*`, fetched at entry and kept until the
return) and the return value (`$retval`), then all of them enabled with one write.

One event a function, not an entry and an exit event: registering and enabling an fprobe event
costs about 0.1 s under TCG each, and a thousand functions are the point.

Usage: fetcher_probes.py GROUP FUNCTIONS-FILE [CALLED-FILE]. With CALLED-FILE (names, one a
line), only the functions of the list named there get an event, still numbered by their place in
the list: the ones the workload calls, the only ones compared (a thousand events took four
minutes to register and enable under TCG, for a third of them called). Prints how long
registering and enabling took, and what the kernel refused: `$retval` of a void function
(expected), `$arg*` where it has no BTF.
"""

import os
import sys
import time

TRACING = "/sys/kernel/tracing"
RETVAL = "retval_"  # the return value's field: no parameter is called that


def traceable() -> set[str]:
    with open(f"{TRACING}/available_filter_functions") as f:
        return {line.split()[0] for line in f if line.strip()}


def register(group: str, names: list[str], only: set[str] | None = None) -> tuple[int, list[str]]:
    """(events registered, what was refused); event c<i> is function i of the list. What the
    kernel refuses of `$arg* retval_=$retval` is dropped, the rest kept."""
    known = traceable() if only is None else traceable() & only
    registered, refused = 0, []
    fd = os.open(f"{TRACING}/dynamic_events", os.O_WRONLY | os.O_APPEND)
    try:
        for i, name in enumerate(names):
            if name not in known:
                continue
            head = f"f:{group}/c{i} {name}%return"
            for fetch in (f"$arg* {RETVAL}=$retval", "$arg*", f"{RETVAL}=$retval", ""):
                try:
                    os.write(fd, f"{head} {fetch}\n".encode())
                except OSError as e:
                    refused.append(f"{head} {fetch}: {e.strerror}")
                    continue
                registered += 1
                break
    finally:
        os.close(fd)
    return registered, refused


def main() -> None:
    group, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        names = f.read().split()
    only = None
    if len(sys.argv) > 3:
        with open(sys.argv[3]) as f:
            only = set(f.read().split())
    start = time.monotonic()
    registered, refused = register(group, names, only)
    registering = time.monotonic() - start
    start = time.monotonic()
    with open(f"{TRACING}/events/{group}/enable", "w") as f:
        f.write("1")
    enabling = time.monotonic() - start
    print(f"fprobe events: {registered} registered in {registering:.1f}s, enabled in "
          f"{enabling:.1f}s; {len(refused)} fetches refused")
    for line in refused:
        print(f"refused: {line}")


if __name__ == "__main__":
    main()
