"""What a person sees of a matplotlib figure, measured on its renderer: texts that leave the figure."""

from __future__ import annotations

from typing import Any


def texts_outside_figure(figure: Any) -> list[str]:
    """The panels (by title, else label) whose drawn texts (title, axis labels, tick labels, legend, notes) are
    not wholly inside the figure, and the figure's own texts (its title) that are not. Measured on what is drawn:
    a tick outside the view is not."""
    renderer = figure.canvas.get_renderer()
    frame = figure.bbox

    def leaves(box: Any) -> bool:
        return box.x0 < frame.x0 - 1 or box.y0 < frame.y0 - 1 or box.x1 > frame.x1 + 1 or box.y1 > frame.y1 + 1

    outside = [ax.get_title() or ax.get_ylabel() or ax.get_xlabel() or "(a panel)" for ax in figure.axes
               if leaves(ax.get_tightbbox(renderer))]
    return outside + [t.get_text() for t in figure.texts if t.get_text() and leaves(t.get_window_extent(renderer))]
