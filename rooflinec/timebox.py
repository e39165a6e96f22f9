"""Time budgets for the sympy steps whose cost no formula budget can bound in advance:
simplifying, taking limits, finding roots.

`run(seconds, fn, fallback)` calls `fn()`; if it has not returned within `seconds`, it is
interrupted (a SIGALRM timer) and `fallback()` is returned instead, the stated fallback of
the caller ("not simplified", "no limit found within budget"). A budget opened inside
another adds no timer of its own: the outer one bounds both, and its fallback applies.
Without SIGALRM (Windows) or off the main thread, `fn` runs unbounded.

A study whose formulas keep running out of time would pay every budget in turn, so after
STRIKES budgets have run out, each later one gets AFTER_STRIKES seconds: plenty for the
simplifications of built-in ops (milliseconds), not for more of what already failed.
`reset()` starts a study's count afresh, so one study's report does not depend on another.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

SIMPLIFY_S = 1.0    # one factorisation or expansion
LIMIT_S = 1.0       # one limit as a symbol grows
ROOTS_S = 1.0       # the real roots of one crossing polynomial

STRIKES = 3
AFTER_STRIKES = 0.25

_active = False
_strikes = 0


def reset() -> None:
    global _strikes
    _strikes = 0


class OverBudget(Exception):
    """Raised inside `fn` when its time is up."""


def _alarm(signum, frame):
    raise OverBudget()


def run(seconds: float, fn: Callable, fallback: Callable):
    global _active, _strikes
    if _active or not hasattr(signal, "setitimer") \
            or threading.current_thread() is not threading.main_thread():
        return fn()
    previous = signal.signal(signal.SIGALRM, _alarm)
    _active = True
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds if _strikes < STRIKES else AFTER_STRIKES)
        try:
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except OverBudget:
        _strikes += 1
        return fallback()
    finally:
        _active = False
        signal.signal(signal.SIGALRM, previous)
