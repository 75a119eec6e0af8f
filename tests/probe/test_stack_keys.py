"""`--by kstack` / `--by ustack` parsed (stack_keys.split, and the command line around it): the
stack key taken out of the --by options, the stack it takes chosen for the build, and every
input that does not fit said in one line with exit status 2, before anything is built."""

from __future__ import annotations

import pytest

from btfgen.probe import stack_keys, tool
from btfgen.trace import command


@pytest.mark.parametrize("bys, kernel, want", [
    (["ustack"], False, ("ustack", [])),
    ([" ustack "], False, ("ustack", [])),
    (["kstack"], True, ("kstack", [])),
    (["ustack"], True, ("ustack", [])),  # a kernel function's task's user stack
    (["comm"], False, (None, ["comm"])),
    (["leaf: i"], False, (None, ["leaf: i"])),
    ([], True, (None, [])),
])
def test_split(bys, kernel, want):
    assert stack_keys.split(bys, kernel) == want


@pytest.mark.parametrize("bys, kernel, said", [
    (["kstack"], False, "--by kstack: column 1: a user function's call has no kernel stack of "
                        "its own (the uprobe's); give --by ustack"),
    (["ustack", "ustack"], False, "--by 'ustack': column 1: --by ustack is given already"),
    (["ustack", "kstack"], False, "--by 'kstack': column 1: one stack key: kstack or ustack "
                                  "for kernel functions, ustack for user functions"),
    (["kstack", "ustack"], True, "--by 'ustack': column 1: one stack key: kstack or ustack "
                                 "for kernel functions"),
    (["ustack", "comm"], False, "--by 'comm': column 1: --by ustack keys every function by its "
                                "stack, counted by the tracer from each call's event; other "
                                "keys are counted in the kernel, and the two are not combined"),
    (["leaf: i", "ustack"], False, "--by 'leaf: i': column 1: --by ustack keys every"),
    (["leaf: ustack"], False, "--by 'leaf: ustack': column 7: a stack key keys every traced "
                              "function: give it alone, `--by ustack`"),
    (["leaf: i,  kstack"], True, "--by 'leaf: i,  kstack': column 11: a stack key keys every"),
])
def test_split_refuses(bys, kernel, said):
    with pytest.raises(ValueError) as e:
        stack_keys.split(bys, kernel)
    assert str(e.value).startswith(said)
    assert "\n" not in str(e.value)


def _said(capsys, argv: list[str]) -> str:
    """What the command line says of `argv` (refused: exit 2), its one line."""
    with pytest.raises(SystemExit) as e:
        command.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("argv, said", [
    (["--count", "--by", "kstack", "prog", "leaf"], "a user function's call has no kernel"),
    (["--kernel", "--latency", "--by", "ustack", "--stack=kernel", "vfs_read"],
     "--by ustack keys calls by their user stack: --stack=kernel does not take it"),
    (["--by", "ustack", "prog", "leaf"], "--by keys a summary: give --count or --latency"),
    (["--count", "--by", "ustack", "--by", "comm", "prog", "leaf"], "not combined"),
    (["--count", "--by", "ustack", "--stack=kernel", "prog", "leaf"],
     "--by ustack keys calls by their user stack: --stack=kernel does not take it"),
    (["--count", "--stack", "prog", "leaf"], "key them by the stack with --by kstack"),
    (["--count", "--by", "ustack", "--record", "f", "prog", "leaf"],
     "--by ustack: its calls are counted by the tracer from their events; recording them"),
    (["--run", "d", "--by", "ustack"], "--count, --latency and --by were chosen at --build"),
    (["--count", "--by", "leaf: ustack", "prog", "leaf"], "column 7: a stack key keys every"),
])
def test_bad_stack_keys_one_line_exit_2(capsys, argv, said):
    assert said in _said(capsys, argv)


def test_a_stack_key_takes_its_stack_for_the_build():
    p = tool._parser()
    for argv, stack in ((["--count", "--by", "ustack", "prog", "leaf"], ("user",)),
                        (["--latency", "--by", "ustack", "--stack", "prog", "leaf"], ("user",)),
                        (["--kernel", "--count", "--by", "kstack", "vfs_read"], ("kernel",)),
                        (["--kernel", "--count", "--by", "ustack", "vfs_read"], ("user",)),
                        (["--kernel", "--latency", "--by", "ustack", "--stack=user,kernel",
                          "vfs_read"], ("kernel", "user"))):
        args = p.parse_args(tool.stack_value(argv))
        tool._check(p, args, [])
        assert tool.stacks_asked(args) == stack
        assert args.by == [] and args.stack_key == argv[argv.index("--by") + 1]
        # the build asks for no summary in the kernel: the tracer counts the events
        assert command._summary_request(args) == {
            "strings": False, "stack_keys": {"count": args.count, "latency": args.latency,
                                             "by": args.stack_key}}
