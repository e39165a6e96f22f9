"""The planner's chart: every feasible configuration's predicted tokens/s per user against
tokens/s per GPU, one colour per device (triangles: disaggregated pools), the Pareto frontier as a line with each point's
deployment (an SVG, deterministic: render.charts' figure and writer)."""

from __future__ import annotations

import numpy as np

from rooflinec.render import charts


def pareto_svg(table: dict, front: np.ndarray, labels: list[str], title: str) -> str:
    fig = charts._matplotlib()(figsize=(8.0, 5.0))
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.13, top=0.9)
    ax = fig.add_subplot(1, 1, 1)
    x, y = table["per_user"], table["per_gpu"]
    if len(x):
        for i, dev in enumerate(dict.fromkeys(table["device"])):
            for mode, marker, name in (("agg", "o", dev), ("disagg", "^", f"{dev}, disaggregated")):
                on = (table["device"] == dev) & (table["mode"] == mode)
                if on.any():
                    ax.scatter(x[on], y[on], s=6, alpha=0.45, lw=0, marker=marker, label=name,
                               color=charts.SERIES_COLOURS[i % len(charts.SERIES_COLOURS)])
        ax.plot(x[front], y[front], "-o", color="black", lw=0.8, ms=3, label="Pareto frontier (prediction)")
        for i, text in zip(front, labels):
            ax.annotate(text, (x[i], y[i]), xytext=(3, 3), textcoords="offset points", fontsize=6)
        lo_x, hi_x, lo_y, hi_y = x.min(), x.max(), y.min(), y.max()
        charts._log_axes(ax, (lo_x / 1.5, hi_x * 1.5), (lo_y / 1.5, hi_y * 1.5),
                         "output tokens/s per user (prediction)", "output tokens/s per GPU (prediction)")
        ax.legend(loc="upper right", fontsize=7, frameon=False)
    fig.text(0.5, 0.97, title, ha="center", va="top", fontsize=9)
    return charts._svg(fig)
