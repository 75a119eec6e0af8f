"""A kernel that refuses what its feature probe promised, faked for the tests of the run's
fallbacks (one function it cannot put a return probe on, say): each uprobe.session link's
attach raises as the kernel's refusal would, the other uprobe_multi links attach for real."""

from __future__ import annotations

from btfgen.probe import bpf_object, errors


def refuse_session_links(monkeypatch) -> None:
    multi = bpf_object.BpfObject.attach_uprobe_multi

    def refusing(self, prog, *args, session=False, **kw):
        if session:
            raise errors.BpfLoadError("uprobe_session link for trace_session: refused here")
        return multi(self, prog, *args, session=session, **kw)

    monkeypatch.setattr(bpf_object.BpfObject, "attach_uprobe_multi", refusing)
