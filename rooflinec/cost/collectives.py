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

Past the scale-up domain (a group of n devices over domains of d devices each, d < n; the
link is then the scale-out network, each device with its own NIC of bandwidth b, besides its
scale-up port of bandwidth B), two cuts bound the time (`least_rate`):

- a device's ports: what a device must receive or send (the fractions above) passes its two
  ports together, at most B + b bytes per second;
- a domain's NICs: what must cross the cut around one domain passes its d NICs, at most d b
  per second each way. A domain holds at most m = min(d, n - 1) of the group (m is where each
  cut below is least, so the bound holds however the group is placed):
  all-reduce: the domain's results depend on the other members' inputs, V incompressible
    bytes, which must enter: V over m b;
  reduce-scatter: the domain's partial sums for the other members' slices, (n - m)/n V,
    must leave; all-gather: the others' (n - m)/n V must enter, over m b;
  all-to-all: each of the m members' (n - m)/n V bound outside must leave, m (n - m)/n V
    over m b; p2p: the V bytes cross once, over m b.
So the least time is one latency (the network's, the slower link's) + the larger of the two
cuts: for the 2-domain all-reduce of V, max(V / (B + b), V / (d b)). A hierarchical
algorithm (reduce-scatter inside the domain, the slices across it each over its own NIC,
all-gather inside) comes near it; a ring over one NIC per hop (the expected time) pays
2(n - 1)/n V / b.
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
    domain: int | None = None       # past the scale-up domain: the devices (each a NIC) one joins
    scale_up: float | None = None   # ... and each device's scale-up port, B/s per direction


def _domain_share(kind: str, n: int, m: int) -> sp.Expr:
    """Share of the payload that must cross one domain's NICs (m members of n), per NIC
    (the module's cut around a domain)."""
    if kind in ("all_reduce", "p2p"):
        return sp.Rational(1, m)
    return sp.Rational(n - m, n) / (1 if kind == "all_to_all" else m)


def least_rate(kind: str, n: int, link: Link, in_network: bool | None = None) -> sp.Expr:
    """Bytes per second at which a collective's least volume (`least_fraction` x payload) can
    move: the link's own bandwidth inside one domain; past it (`link.domain` set) the slower
    of the module's two cuts, a device's ports together and a domain's NICs."""
    if link.domain is None or n <= 1:
        return sp.nsimplify(link.bandwidth)
    f = least_fraction(kind, n, in_network)
    ports = sp.nsimplify(link.bandwidth) + sp.nsimplify(link.scale_up or 0)
    nics = f * sp.nsimplify(link.bandwidth) / _domain_share(kind, n, min(link.domain, n - 1))
    return sp.Min(ports, nics)


def time(volume: float, n_steps: int, link: Link) -> float:
    """volume / bandwidth + steps x latency (no latency term where none is known)."""
    return transfer_time(volume, link.bandwidth) + n_steps * (link.latency or 0.0)


def ring_time(kind: str, payload, n: int, link: Link):
    """The expected time of one collective of `payload` bytes over n devices: the ring's."""
    return time(fraction(kind, n) * payload, steps(kind, n), link)


def least_time(kind: str, payload, n: int, link: Link, in_network: bool | None = None):
    """The least time any correct algorithm takes for one collective of `payload` bytes over
    n devices on `link` (the module's derivation): every bound's collective time. At most
    `ring_time` and at most the one-shot time (`time(fraction x payload, 1, link)`); past the
    scale-up domain at the rate of the slower cut (`least_rate`)."""
    volume = least_fraction(kind, n, in_network) * payload
    return (transfer_time(volume, least_rate(kind, n, link, in_network))
            + least_steps(kind, n) * (link.latency or 0.0))


def latency_bound(volume: float, n_steps: int, link: Link) -> bool:
    return n_steps * (link.latency or 0.0) > transfer_time(volume, link.bandwidth)
