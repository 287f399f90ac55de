"""PNG charts for the benchmarks (`--chart PATH`): each measured series next to its baseline.
matplotlib comes with the `bench` extra (`pip install '.[bench]'`); the Agg backend needs no display."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path


def line_chart(path: Path, series: Mapping[str, Sequence[tuple[float, float]]], *, title: str, xlabel: str,
               ylabel: str, log_y: bool = False) -> None:
    """One line per series (label → (x, y) points), written to `path` as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    for (label, points), marker in zip(series.items(), "os^vD<>ph*", strict=False):
        ax.plot([x for x, _ in points], [y for _, y in points], marker=marker, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log_y:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
