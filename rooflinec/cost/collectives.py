"""Collectives: communication as ops with symbolic costs; the ring model that is their
expected time, and the least time any correct algorithm takes, which every bound uses.

A collective moves `payload` bytes (the whole tensor, a sympy expression of the alphabet)
among n devices, each with a port of bandwidth B per direction and a latency a per message.

The expected algorithm: the ring (Patarasuk and Yuan 2009; NCCL's ring). Each device sends
`fraction(kind, n) x payload` bytes in `steps(kind, n)` steps:

  all_reduce       2(n-1)/n   2(n-1) steps   a reduce-scatter, then an all-gather
  reduce_scatter    (n-1)/n    n-1 steps
  all_gather        (n-1)/n    n-1 steps
  all_to_all        (n-1)/n    n-1 steps     each device keeps 1/n of its payload
  p2p               1          1 step        one send between pipeline stages

and its time is volume / link bandwidth (per direction) + steps x link latency (`time`),
so a small decode message shows as latency-bound when the second term is the larger.

The least time (`least_time`), from first principles: data are incompressible (a sum of
generic inputs carries as many bytes as one input), nothing that depends on another device's
input arrives before one latency a after the collective starts, and a port then moves at
most B bytes per second each way. So a collective takes at least a + (the bytes some port
must carry) / B, where those bytes are:

- all-reduce (each device holds V = payload, each ends with the V-byte sum). Each device's
  result depends on the others' inputs, V bytes it cannot compute itself: it receives at
  least V, and sends at least V (every other result depends on all of its input). Without
  reduction in the network, every byte of the sum must also be combined on some device:
  a byte of output needs 2(n-1) one-way messages across the n devices (the fewest for
  one-way gossip), 2(n-1) V bytes sent over n ports, 2(n-1)/n V on the busiest; the ring
  reaches it. With reduction in the network (NVLink SHARP in an NVSwitch, InfiniBand SHARP)
  a device sends its V once and receives the reduced V once: V. The least is V x
  min(1, 2(n-1)/n) = V for n >= 2 (2(n-1)/n = 1 at n = 2), one latency.
- reduce-scatter (each holds V, each ends with its V/n slice of the sum): a device's input
  outside its own slice, (n-1)/n V, is needed elsewhere and must leave it, whether the
  network reduces or not: (n-1)/n V, one latency.
- all-gather (each holds V/n, each ends with V): a device must receive the others' (n-1)/n V;
  a multicasting switch saves senders bytes, never receivers: (n-1)/n V, one latency.
- all-to-all (each holds V, keeps 1/n): the other (n-1)/n V must leave, and as much arrive:
  (n-1)/n V, one latency (on a switch every pair sends at once).
- p2p: the V bytes once, one latency.

So only the all-reduce's least volume is below the ring's, and every collective's least
latency is one message's: the ring's 2(n-1) or n-1 latencies are its own, not a law
(one-shot all-reduces over NVSwitch, vLLM's and TensorRT-LLM's custom all-reduce, pay one).
A hardware spec does not record whether its fabric reduces in the network (`interconnect`
gives a name, a bandwidth, a latency and the domain's size), so the least time takes the
smaller figure, the one that holds for either fabric (`least_fraction(in_network=None)`).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from rooflinec.base.roofline import transfer_time

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p")
RING, LEAST = "ring", "least"      # the algorithms a time is asked under: expected, or the bound's
ALGORITHMS = (RING, LEAST)


def _known(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}")


def fraction(kind: str, n: int) -> sp.Expr:
    """Share of the payload each device sends under the ring (the expected algorithm)."""
    _known(kind)
    if n <= 1:
        return sp.Integer(0)
    if kind == "p2p":
        return sp.Integer(1)
    ring = sp.Rational(n - 1, n)
    return 2 * ring if kind == "all_reduce" else ring


def steps(kind: str, n: int) -> int:
    """Latencies the ring pays (the expected algorithm)."""
    if n <= 1:
        return 0
    return {"all_reduce": 2 * (n - 1), "p2p": 1}.get(kind, n - 1)


def least_fraction(kind: str, n: int, in_network: bool | None = None) -> sp.Expr:
    """Share of the payload the busiest port must carry under any correct algorithm (the
    module): the all-reduce's V with reduction in the network, 2(n-1)/n V without; `None`
    (the fabric not stated) the smaller, which holds for both. Never above `fraction`."""
    _known(kind)
    if n <= 1:
        return sp.Integer(0)
    if kind != "all_reduce":
        return fraction(kind, n)
    ring = fraction(kind, n)
    return ring if in_network is False else sp.Min(sp.Integer(1), ring)


def least_steps(kind: str, n: int) -> int:
    """Latencies any correct algorithm pays: one message's (none on one device)."""
    _known(kind)
    return 0 if n <= 1 else 1


def volume(kind: str, n: int, payload, algorithm: str = RING):
    """Bytes the busiest device sends: the ring's, or the least any algorithm must."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    return (fraction if algorithm == RING else least_fraction)(kind, n) * payload


def latencies(kind: str, n: int, algorithm: str = RING) -> int:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    return (steps if algorithm == RING else least_steps)(kind, n)


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
        """Bytes each device sends under the ring."""
        return fraction(self.kind, self.devices) * self.payload

    @property
    def steps(self) -> int:
        return steps(self.kind, self.devices)

    def volume_under(self, algorithm: str) -> sp.Expr:
        """Bytes the busiest device sends under `algorithm` (RING or LEAST)."""
        return volume(self.kind, self.devices, self.payload, algorithm)

    def steps_under(self, algorithm: str) -> int:
        return latencies(self.kind, self.devices, algorithm)


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float          # B/s per device per direction
    latency: float | None     # s per step; None where no source states it (the term is left out)


def time(volume: float, n_steps: int, link: Link) -> float:
    """volume / bandwidth + steps x latency (no latency term where none is known)."""
    return transfer_time(volume, link.bandwidth) + n_steps * (link.latency or 0.0)


def ring_time(kind: str, payload, n: int, link: Link):
    """The expected time of one collective of `payload` bytes over n devices: the ring's."""
    return time(fraction(kind, n) * payload, steps(kind, n), link)


def least_time(kind: str, payload, n: int, link: Link, in_network: bool | None = None):
    """The least time any correct algorithm takes for one collective of `payload` bytes over
    n devices on `link` (the module's derivation): every bound's collective time. At most
    `ring_time` and at most the one-shot time (`time(fraction x payload, 1, link)`)."""
    return time(least_fraction(kind, n, in_network) * payload, least_steps(kind, n), link)


def latency_bound(volume: float, n_steps: int, link: Link) -> bool:
    return n_steps * (link.latency or 0.0) > transfer_time(volume, link.bandwidth)
