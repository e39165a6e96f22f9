"""Collectives: communication as ops with symbolic costs, and the ring model that times them.

A collective moves `payload` bytes (the whole tensor, a sympy expression of the alphabet)
among n devices. Under the ring algorithms (Patarasuk and Yuan 2009; NCCL's ring) each
device sends `fraction(kind, n) x payload` bytes in `steps(kind, n)` steps:

  all_reduce       2(n-1)/n   2(n-1) steps   a reduce-scatter, then an all-gather
  reduce_scatter    (n-1)/n    n-1 steps
  all_gather        (n-1)/n    n-1 steps
  all_to_all        (n-1)/n    n-1 steps     each device keeps 1/n of its payload
  p2p               1          1 step        one send between pipeline stages

and its time is volume / link bandwidth (per direction) + steps x link latency, so a small
decode message shows as latency-bound when the second term is the larger.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from rooflinec.base.roofline import transfer_time

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p")


def fraction(kind: str, n: int) -> sp.Expr:
    """Share of the payload each device sends."""
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}")
    if n <= 1:
        return sp.Integer(0)
    if kind == "p2p":
        return sp.Integer(1)
    ring = sp.Rational(n - 1, n)
    return 2 * ring if kind == "all_reduce" else ring


def steps(kind: str, n: int) -> int:
    if n <= 1:
        return 0
    return {"all_reduce": 2 * (n - 1), "p2p": 1}.get(kind, n - 1)


@dataclass(frozen=True)
class Collective:
    """One collective in a program: after op `after`, over `devices` devices, `repeat` times."""

    name: str
    kind: str
    payload: sp.Expr          # bytes of the whole tensor (symbolic)
    devices: int              # n: the group's size
    group: str                # which parallel degree forms the group: tp, pp, ep, dp
    span: int                 # devices between the group's ends (tp: n; dp: tp*pp*dp), which
                              # decides whether it stays inside one scale-up domain
    repeat: sp.Expr = sp.Integer(1)
    after: str = ""           # the op whose output it combines
    why: str = ""

    @property
    def volume(self) -> sp.Expr:
        """Bytes each device sends."""
        return fraction(self.kind, self.devices) * self.payload

    @property
    def steps(self) -> int:
        return steps(self.kind, self.devices)


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float          # B/s per device per direction
    latency: float | None     # s per step; None where no source states it (the term is left out)


def time(volume: float, n_steps: int, link: Link) -> float:
    """Ring model: volume / bandwidth + steps x latency (no latency term where none is known)."""
    return transfer_time(volume, link.bandwidth) + n_steps * (link.latency or 0.0)


def latency_bound(volume: float, n_steps: int, link: Link) -> bool:
    return n_steps * (link.latency or 0.0) > transfer_time(volume, link.bandwidth)
