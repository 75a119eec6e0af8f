"""The manifest (trace.json) as one typed record: written as the build always wrote it, read by
attribute; a directory written by another version says what it lacks in one line, and what it
holds that this version does not know, rather than dropping it silently."""

from __future__ import annotations

import json

import pytest
from manifests import BASE, manifest

from btfgen.probe import manifest as trace_manifest
from btfgen.probe.errors import InputError


def _write(tmp_path, data: dict) -> None:
    (tmp_path / trace_manifest.MANIFEST).write_text(json.dumps(data))


def test_written_and_read_back_the_same():
    made = manifest(kind="user", program="/bin/true", library=False, offsets=[64],
                    functions=["main"], btf_ids=[3],
                    summary={"count": True, "latency": False, "by": [], "keys": [],
                             "key_size": 8, "keyspecs": "k.bin"})
    text = made.to_json()
    assert list(json.loads(text))[:3] == ["format", "kind", "arch"]
    assert "btf_sha256" not in json.loads(text)  # None: left out, as the build left it out
    again, unknown = trace_manifest.Manifest.from_dict(json.loads(text), "t")
    assert again == made and not unknown
    assert again.summary.count and again.summary.exit  # exit: True where it is not said


def test_a_missing_field_is_one_line(tmp_path):
    data = {"format": trace_manifest.FORMAT, **BASE}
    del data["btf_ids"]
    _write(tmp_path, data)
    with pytest.raises(InputError) as e:
        trace_manifest.load_manifest(tmp_path)
    assert str(e.value) == (f"{tmp_path / 'trace.json'}: no field 'btf_ids' (written by another "
                            "version of btfgen trace?): build the directory again")


def test_a_missing_field_of_an_entry_is_named_by_its_entry(tmp_path):
    _write(tmp_path, {"format": trace_manifest.FORMAT, **BASE,
                      "btf_module": {"name": "m", "btf": "m.ko", "btf_sha256": "00"}})
    with pytest.raises(InputError, match=r"trace.json: btf_module: no field 'first_id'"):
        trace_manifest.load_manifest(tmp_path)


def test_an_unknown_field_is_said_and_the_rest_read(tmp_path, capsys):
    _write(tmp_path, {"format": trace_manifest.FORMAT, **BASE, "newer": 1,
                      "trampoline": {"variants": [], "objects": {}, "specs": "t.bin",
                                     "module": "t.py", "refused": {}, "later": 2}})
    made = trace_manifest.load_manifest(tmp_path)
    assert made.functions == [] and made.trampoline.specs == "t.bin"
    assert capsys.readouterr().err == (
        f"btfgen trace: warning: {tmp_path / 'trace.json'}: fields this version does not know, "
        "ignored: newer, trampoline.later\n")


def test_the_run_side_cannot_change_it():
    with pytest.raises(AttributeError):
        manifest().functions = ["f"]
