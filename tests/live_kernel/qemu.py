"""Boot a kernel + initramfs under QEMU (TCG) with a timeout; return what the guest printed.

The guest's only channel out is its serial console: /init prints results between marker lines
(`@@btfgen-begin NAME` / `@@btfgen-end NAME rc=N`), which `Boot.section` cuts out again.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .targets import Target

BEGIN = "@@btfgen-begin"
END = "@@btfgen-end"
DONE = "@@btfgen-done"
TIME = "@@btfgen-time"  # NAME START END: the guest's uptime in seconds around a step


class GuestError(AssertionError):
    """The kernel did not boot, the guest hung, or a guest step failed: carries the console tail."""


@dataclass(frozen=True)
class Boot:
    target: Target
    output: str  # console text, "\r\n" folded to "\n"
    returncode: int | None
    timed_out: bool
    seconds: float
    timeout: float

    def tail(self, n: int = 25) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-n:])

    def fail(self, what: str) -> GuestError:
        return GuestError(f"{self.target.name}: {what}; last console lines:\n{self.tail()}")

    def check_done(self) -> None:
        if self.timed_out:
            raise self.fail(f"guest did not finish within {self.timeout:.0f}s")
        if DONE not in self.output:
            raise self.fail(f"guest stopped early (QEMU exit {self.returncode})")

    def timings(self) -> dict[str, tuple[float, float]]:
        """Each step's (start, end), the guest's uptime in seconds, and "done"'s: where a
        guest's time went (the boot before the first step included)."""
        return {m.group(1): (float(m.group(2)), float(m.group(3))) for m in re.finditer(
            rf"^{re.escape(TIME)} (\S+) ([\d.]+) ([\d.]+)$", self.output, re.M)}

    def section(self, name: str) -> tuple[str, int]:
        """The lines a guest step printed and its exit status."""
        m = re.search(
            # Firmware escape sequences may precede the first marker on its line.
            rf"{re.escape(BEGIN)} {re.escape(name)}\n(.*?)^{re.escape(END)} {re.escape(name)} "
            r"rc=(\d+)$",
            self.output,
            re.S | re.M,
        )
        if not m:
            raise self.fail(f"no output section {name!r}")
        return m.group(1), int(m.group(2))


def boot(
    target: Target, kernel: Path, initrd: bytes, append: str = "", timeout: float | None = None
) -> Boot:
    timeout = timeout or target.timeout
    with tempfile.TemporaryDirectory(prefix="btfgen-qemu-") as tmp:
        rd = Path(tmp) / "initrd.gz"
        rd.write_bytes(initrd)
        log = Path(tmp) / "console"
        cmd = [
            *target.qemu,
            "-nographic",
            "-no-reboot",
            "-kernel", str(kernel),
            "-initrd", str(rd),
            "-append", f"console={target.console} panic=-1 quiet {target.append} {append}".strip(),
        ]
        start = time.monotonic()
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
            try:
                rc: int | None = proc.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc, timed_out = None, True
        seconds = time.monotonic() - start
        text = log.read_bytes().decode("utf-8", "replace").replace("\r", "")
    return Boot(target, text, rc, timed_out, seconds, timeout)
