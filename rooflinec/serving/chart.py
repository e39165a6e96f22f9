"""The simulated run over time: requests running and waiting, and tokens per step (an SVG)."""

from __future__ import annotations

import textwrap

import numpy as np

from rooflinec.render import charts


def timeline(res, title: str) -> str:
    """Running and waiting requests (left axis) and tokens per step (right axis) against time;
    the same run gives the same bytes (charts._svg)."""
    fig = charts._matplotlib()(figsize=(8.0, 3.6))
    title = textwrap.wrap(title, 100)
    # the title's lines, then the legend in one row, above the axes (never over the lines)
    fig.subplots_adjust(left=0.09, right=0.9, bottom=0.15, top=0.86 - 0.045 * (len(title) - 1))
    ax = fig.add_subplot(1, 1, 1)
    tl = res.timeline
    if len(tl):
        t = np.append(tl[:, 0], res.finish_s[np.isfinite(res.finish_s)].max())
        for col, label, colour in ((2, "running (batch)", charts.SERIES_COLOURS[0]),
                                   (3, "waiting (queue)", charts.SERIES_COLOURS[1])):
            ax.step(t, np.append(tl[:, col], tl[-1, col]), where="post", lw=0.8, color=colour, label=label)
        tokens = ax.twinx()
        tokens.step(t, np.append(tl[:, 4], tl[-1, 4]), where="post", lw=0.5, color=charts.SERIES_COLOURS[2],
                    alpha=0.6, label="tokens per step")
        tokens.set_ylabel("tokens per step", fontsize=8)
        tokens.tick_params(labelsize=7)
        tokens.set_ylim(bottom=0)
        lines = ax.get_legend_handles_labels()[0] + tokens.get_legend_handles_labels()[0]
        ax.legend(lines, [h.get_label() for h in lines], loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=3,
                  fontsize=7, frameon=False, borderaxespad=0.2)
    ax.set_xlabel("time (s)", fontsize=8)
    ax.set_ylabel("requests", fontsize=8)
    ax.set_ylim(bottom=0)
    ax.tick_params(labelsize=7)
    fig.text(0.5, 0.97, "\n".join(title), ha="center", va="top", fontsize=9)
    return charts._svg(fig)
