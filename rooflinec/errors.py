"""One base error. Spec errors carry every problem found, each located in its file."""

from __future__ import annotations

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
        return f"{self.file}:{self.line}:{self.col}: {self.path}: {self.message}"


class SpecError(RooflineError):
    def __init__(self, problems: list[Problem]):
        self.problems = sorted(set(problems))
        super().__init__("\n".join(map(str, self.problems)))
