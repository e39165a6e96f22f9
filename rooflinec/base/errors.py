"""One base error. Spec errors carry every problem found, each located in its file."""

from __future__ import annotations

import re
from dataclasses import dataclass


class RooflineError(Exception):
    """Anything the user can fix; the CLI prints it and exits 1."""


@dataclass(frozen=True, order=True)
class Problem:
    file: str
    line: int
    col: int
    path: str       # JSON path inside the file, e.g. "attention.n_kv_heads"
    message: str    # what is wrong; what is accepted

    def __str__(self) -> str:
        return one_line(f"{self.file}:{self.line}:{self.col}: {capped(self.path)}: {capped(self.message)}")


MAX_RUN = 200        # characters of one unbroken word a message quotes in full (a file path fits)
MAX_MESSAGE = 2000   # characters of one message
_RUN = re.compile(r"\S{%d,}" % (MAX_RUN + 1))


def shortened(text: str, keep: int = 60) -> str:
    """The start of a long `text` and its length: a message quotes a value, not a file."""
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text)} characters)"


def _short_run(match) -> str:
    head, run, tail = re.fullmatch(r"(\W{0,3})(.*?)(\W{0,3})", match.group(), re.DOTALL).groups()
    return head + shortened(run) + tail   # the quotes and ';' around a value stay whole


def capped(text: str) -> str:
    """`text` with every word over MAX_RUN characters, and the whole over MAX_MESSAGE, shortened."""
    text = _RUN.sub(_short_run, text)
    return text if len(text) <= MAX_MESSAGE else shortened(text, MAX_MESSAGE)


# characters a spec may smuggle into a key or value: line breaks (YAML's \x85, \u2028 and
# \u2029 too), C0 and C1 controls (\x9b opens a terminal escape), lone surrogates (no UTF-8
# encodes them) and the non-characters YAML refuses; one problem stays one printable line
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def _escaped(match) -> str:
    c = ord(match.group())
    return repr(chr(c))[1:-1] if c < 0xa0 else f"\\u{c:04x}"


def one_line(text: str) -> str:
    """`text` with line breaks and other control characters escaped as in Python (\\n ...)."""
    return spelled(text)


def spelled(text: str, unsafe: re.Pattern = _UNSAFE) -> str:
    """`text` with each character `unsafe` matches spelled as Python would (\\x1b, \\ud800)."""
    return unsafe.sub(_escaped, text)


class UsageError(RooflineError):
    """A mistake on the command line: the CLI prints the command's usage line and exits 2."""


class SpecError(RooflineError):
    def __init__(self, problems: list[Problem]):
        self.problems = sorted(set(problems))
        super().__init__("\n".join(map(str, self.problems)))


class DeviceError(RooflineError):
    """One device cannot serve what the study asks of it; `analyses.run` locates it at the device."""

    def __init__(self, device, message: str):
        super().__init__(message)
        self.device = device


class DeviceLacks(DeviceError):
    """A device lacks a figure the study needs: a peak for an op's unit and dtype, or the
    on-chip memory FlashAttention's tiles come from."""

    def __init__(self, device, figure: str, field: str, needed_by: str):
        super().__init__(device, f"device '{device.key}' lists no {figure}, which {needed_by} needs; "
                                 f"add {field} to its hardware spec")


class VariantLacks(DeviceLacks):
    """A device lacks a figure only a variant the study chose needs (FlashAttention's SRAM):
    the section leaves that device out and says so, even where it is the only device."""