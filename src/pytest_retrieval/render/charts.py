"""SVG charts for the HTML report: mean recall@k / nDCG@k curves against k (current, baseline
or one per retriever) and a histogram of a metric's per-query values.

Curves are computed by the gate's own kernels from the stored rankings, so the curve at
k = 10 is exactly recall@10. A curve is drawn only over the k its rankings cover (a baseline
stores its top k only): never extended or flat-lined past them. Both axes are labelled. Every
label goes through ``html.escape``; charts scale down to a narrow screen (``viewBox``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING

import numpy as np

from .. import metrics as kernels

if TYPE_CHECKING:
    from ..baseline import BaselineEntry
    from ..results import EvaluationResult

MAX_CURVE_K = 100
COLOURS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#db2777", "#0891b2"]


def curve(
    runs: Sequence[Sequence[str]], qrels: Sequence[Mapping[str, int]], family: str, depth: int
) -> list[float]:
    """Mean ``family@k`` for k = 1..depth over the labelled queries (the gate's kernels)."""
    kept = [(run, qrel) for run, qrel in zip(runs, qrels, strict=True) if qrel]
    if not kept or depth < 1:
        return []
    names = [f"{family}@{k}" for k in range(1, depth + 1)]
    values = kernels.compute(names, [r for r, _ in kept], [q for _, q in kept])
    return [float(values[name].mean()) for name in names]


def _depth(result: EvaluationResult) -> int:
    longest = max((len(q.returned) for q in result.queries), default=0)
    return max(1, min(MAX_CURVE_K, longest))


def current_curve(result: EvaluationResult, family: str) -> list[float]:
    """Mean ``family@k`` for k = 1..K, K the deepest ranking returned (at most MAX_CURVE_K)."""
    return curve(
        [q.returned for q in result.queries],
        [q.relevant for q in result.queries],
        family,
        _depth(result),
    )


def baseline_curve(result: EvaluationResult, entry: BaselineEntry, family: str) -> list[float]:
    """The baseline's stored rankings scored with today's judgments, on the queries both
    have (a baseline stores the top k only, so its curve stops there)."""
    common = [q for q in result.queries if q.id in entry.queries and q.relevant]
    if not common:
        return []
    depth = min(_depth(result), max(len(entry.queries[q.id].ranked) for q in common))
    return curve(
        [entry.queries[q.id].ranked for q in common], [q.relevant for q in common], family, depth
    )


def _step(span: int, most: int) -> int:
    """A round tick step (1, 2, 5, 10, 20, 25, 50, 100, ...) giving at most ``most`` steps."""
    scale = 1
    while True:
        for base in (1, 2, 5, 10, 20, 25, 50):
            if span <= most * base * scale:
                return base * scale
        scale *= 100


def _ticks(longest: int) -> list[int]:
    """1, then round steps, then ``longest``: at most about six labels."""
    step = _step(longest, 6)
    ticks = [1, *range(step, longest + 1, step)]
    if longest - ticks[-1] >= step / 2:
        ticks.append(longest)
    return sorted(set(ticks))


Series = tuple[str, Sequence[float], bool]  # name, mean metric@k for k = 1.., dashed


WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 362, 250, 54, 12, 30, 40
K_AXIS = "k (rank cutoff)"


def _frame(
    heading: str, x_label: str, y_label: str, y_ticks: Sequence[tuple[float, str]]
) -> list[str]:
    """An SVG chart's opening: title, horizontal grid lines with labels, axes, both axis
    labels (the y label turned along the axis)."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    middle = TOP + plot_h / 2
    parts = [
        f'<svg width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(heading)}">',
        f'<text class="title" x="{LEFT}" y="16">{escape(heading)}</text>',
        f'<text class="axis y" x="12" y="{middle:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {middle:.1f})">{escape(y_label)}</text>',
    ]
    for at, label in y_ticks:
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{at:.1f}" y2="{at:.1f}" '
            f'stroke="#eef0f3"/><text x="{LEFT - 7}" y="{at + 4:.1f}" '
            f'text-anchor="end">{label}</text>'
        )
    parts.append(
        f'<path d="M{LEFT} {TOP}V{TOP + plot_h}H{LEFT + plot_w}" fill="none" stroke="#9ca3af"/>'
        f'<text class="axis x" x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 5}" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    return parts


def line_chart(
    family: str, series: Sequence[Series], gate_k: int | None = None, upto: int | None = None
) -> str:
    """An SVG line chart of mean ``family@k`` against k: labelled axes, ticks, legend, a
    marker at the gate's k, and hover values at the ticked k. ``upto`` cuts every series at
    that k (a close-up of a baseline's stored range). A series shorter than the axis ends
    where its data ends, marked with a bar and "stored to k = n"."""
    if upto is not None:
        series = [(name, values[:upto], dashed) for name, values, dashed in series]
    shown = [s for s in series if s[1]]
    longest = max((len(values) for _, values, _ in shown), default=0)
    if longest == 0:
        return ""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    span = max(1, longest - 1)

    def x(k: float) -> float:
        return LEFT + plot_w * (k - 1) / span

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v)

    ticks = _ticks(longest)
    parts = _frame(
        f"mean {family}@k, k = 1..{longest}",
        K_AXIS,
        f"mean {family}@k",
        [(y(v), f"{v:g}") for v in (0.0, 0.25, 0.5, 0.75, 1.0)],
    )
    for k in ticks:
        parts.append(
            f'<line x1="{x(k):.1f}" x2="{x(k):.1f}" y1="{TOP + plot_h}" y2="{TOP + plot_h + 4}" '
            f'stroke="#9ca3af"/><text x="{x(k):.1f}" y="{TOP + plot_h + 16}" '
            f'text-anchor="middle">{k}</text>'
        )
    if gate_k is not None and 1 < gate_k < longest:
        parts.append(
            f'<line x1="{x(gate_k):.1f}" x2="{x(gate_k):.1f}" y1="{TOP}" y2="{TOP + plot_h}" '
            'stroke="#9ca3af" stroke-dasharray="2 3"/>'
            f'<text x="{x(gate_k) + 4:.1f}" y="{TOP + 10}">k = {gate_k}</text>'
        )
    marked = sorted({*ticks, *([gate_k] if gate_k else [])})
    for i, (name, values, dashed) in enumerate(shown):
        colour = COLOURS[i % len(COLOURS)]
        points = " ".join(f"{x(k):.1f},{y(v):.1f}" for k, v in enumerate(values, 1))
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} '
            f'points="{points}"><title>{escape(name)}</title></polyline>'
        )
        if len(values) < longest:  # its data ends here: say so, draw nothing beyond
            end_x, end_y = x(len(values)), y(values[-1])
            parts.append(
                f'<line class="end" x1="{end_x:.1f}" x2="{end_x:.1f}" y1="{end_y - 7:.1f}" '
                f'y2="{end_y + 7:.1f}" stroke="{colour}" stroke-width="2"/>'
                f'<text class="end" x="{end_x + 4:.1f}" y="{end_y - 9:.1f}" style="fill:{colour}">'
                f"stored to k = {len(values)}</text>"
            )
        for k in (k for k in marked if k <= len(values)):
            parts.append(
                f'<circle cx="{x(k):.1f}" cy="{y(values[k - 1]):.1f}" r="3" fill="{colour}">'
                f"<title>{escape(name)}: {escape(family)}@{k} = {values[k - 1]:.4f}</title>"
                "</circle>"
            )
    parts += _legend([(COLOURS[i % len(COLOURS)], s[0], s[2]) for i, s in enumerate(shown)])
    parts.append("</svg>")
    return f'<div class="chart">{"".join(parts)}</div>'


def _legend(entries: Sequence[tuple[str, str, bool]]) -> list[str]:
    """A boxed legend in the bottom right corner, where rising curves leave room."""
    box_w = 34 + 6.6 * max(len(name) for _, name, _ in entries)
    box_x = WIDTH - RIGHT - box_w - 6
    box_y = HEIGHT - BOTTOM - 10 - 18 * len(entries)
    parts = [
        f'<rect x="{box_x:.1f}" y="{box_y - 6:.1f}" width="{box_w:.1f}" '
        f'height="{18 * len(entries) + 8}" rx="4" fill="#fff" fill-opacity="0.9" '
        'stroke="#e5e7eb"/>'
    ]
    for i, (colour, name, dashed) in enumerate(entries):
        row_y = box_y + 18 * i + 6
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        parts.append(
            f'<line x1="{box_x + 8:.1f}" x2="{box_x + 26:.1f}" y1="{row_y:.1f}" y2="{row_y:.1f}" '
            f'stroke="{colour}" stroke-width="2.5"{dash}/>'
            f'<text x="{box_x + 31:.1f}" y="{row_y + 4:.1f}">{escape(name)}</text>'
        )
    return parts


def histogram(result: EvaluationResult, metric: str, bins: int = 10) -> str:
    """An SVG histogram of the per-query values of ``metric`` over [0, 1], with the mean."""
    values = np.array([q.metrics.get(metric, math.nan) for q in result.queries], dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return ""
    counts, _ = np.histogram(values, bins=bins, range=(0.0, 1.0))
    mean = float(values.mean())
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = _step(int(counts.max()), 4)
    top_count = float(max(1, math.ceil(int(counts.max()) * 1.08 / step)) * step)
    bar = plot_w / bins

    def y(count: float) -> float:
        return TOP + plot_h * (1 - count / top_count)

    parts = _frame(
        f"{metric} per query ({values.size}), mean {mean:.3f}",
        metric,
        "queries",
        [(y(c), str(c)) for c in range(0, int(top_count) + 1, step)],
    )
    for i, count in enumerate(counts.tolist()):
        bar_x = LEFT + i * bar
        closing = "]" if i == bins - 1 else ")"
        parts.append(
            f'<rect x="{bar_x + 1.5:.1f}" y="{y(count):.1f}" width="{bar - 3:.1f}" '
            f'height="{y(0) - y(count):.1f}" rx="2" fill="#93c5fd"><title>{escape(metric)} in '
            f"[{i / bins:.1f}, {(i + 1) / bins:.1f}{closing}: {count} queries</title></rect>"
        )
    for i in range(0, bins + 1, 2):
        parts.append(
            f'<text x="{LEFT + i * bar:.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">'
            f"{i / bins:.1f}</text>"
        )
    mean_x = LEFT + plot_w * mean
    parts.append(
        f'<line x1="{mean_x:.1f}" x2="{mean_x:.1f}" y1="{TOP}" y2="{TOP + plot_h}" '
        f'stroke="#1e3a8a" stroke-dasharray="4 3"><title>mean {mean:.4f}</title></line>'
        "</svg>"
    )
    return f'<div class="chart">{"".join(parts)}</div>'
