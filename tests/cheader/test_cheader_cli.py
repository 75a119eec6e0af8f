"""--header on the command line: `btfgen layout` and `btfgen` (generate) take prototypes from C
headers instead of BTF, and a header that does not parse is one line and exit status 2."""

import json
import subprocess
import sys
from pathlib import Path

HEADER = Path(__file__).resolve().parent.parent / "live_uprobe" / "target.h"


def _btfgen(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "btfgen", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_layout_from_header_places_stack_arguments():
    out = _btfgen("layout", "--header", str(HEADER), "--arch", "aarch64", "--func", "many",
                  "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["arch"] == "arm64"
    [fn] = doc["functions"]
    regs = [a["pieces"][0].get("hwreg") for a in fn["args"][:8]]
    assert regs == [f"x{i}" for i in range(8)]
    # The ninth argument and later ones are on the stack (AAPCS64: from the entry SP up).
    assert all("stack" in p for a in fn["args"][8:] for p in a["pieces"])


def test_generate_from_header(tmp_path):
    out = _btfgen("--header", str(HEADER), "--arch", "riscv64", "--func", "many", "-o",
                  str(tmp_path), "-q")
    assert out.returncode == 0, out.stderr
    manifest = json.loads((tmp_path / "layout.json").read_text())
    assert [f["name"] for f in manifest["functions"]] == ["many"]
    assert (tmp_path / "btfgen.bpf.h").read_text().count("btfgen_entry_many(") >= 1


def test_broken_header_is_one_line(tmp_path):
    bad = tmp_path / "bad.h"
    bad.write_text("int f(struct nope x);\nunknown_t g(void);\n")
    out = _btfgen("layout", "--header", str(bad), "--arch", "x86_64")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "bad.h:" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
