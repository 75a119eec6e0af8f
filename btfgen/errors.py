"""The exception hierarchy. Every message is one line that says where, then what."""


class BtfgenError(Exception):
    """Anything the CLI reports as a one-line error with exit status 2."""


class BtfgenWarning(UserWarning):
    """Something the library did not do, and why (DWARF it could not read, BTF kinds it does
    not know); the CLI prints each as one `btfgen: warning:` line."""


class BtfError(BtfgenError):
    """Malformed or unreadable BTF: the message names the file, byte offset and type id."""


class NoBtfSection(BtfError):
    """An ELF file without .BTF: a program built with -g gets its BTF from its DWARF instead."""


class AbiError(BtfgenError):
    """An ABI description that does not parse or does not make sense (file:line:col: what)."""


class ArchError(BtfgenError):
    """An architecture name no description answers to."""


class HeaderError(BtfgenError):
    """A C header that libclang could not parse."""


class DwarfError(BtfgenError):
    """DWARF that is missing, damaged, of an unknown version or of another arch."""
