"""What a person sees of a matplotlib figure, measured on its renderer: texts that leave the figure or their
panel, and markers a text box covers (a label drawn over the point it names hides it)."""

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


def notes_outside_their_panel(ax: Any) -> list[str]:
    """The annotations of `ax` whose text box leaves the panel's area."""
    renderer = ax.figure.canvas.get_renderer()
    panel = ax.get_window_extent(renderer)
    return [note.get_text() for note in ax.texts
            if not panel.contains(*note.get_window_extent(renderer).p0)
            or not panel.contains(*note.get_window_extent(renderer).p1)]


def points_under_notes(ax: Any) -> int:
    """How many scatter markers of `ax` lie under one of its annotations' text boxes."""
    import numpy as np

    renderer = ax.figure.canvas.get_renderer()
    boxes = [note.get_bbox_patch().get_window_extent(renderer) if note.get_bbox_patch() is not None
             else note.get_window_extent(renderer) for note in ax.texts]
    covered = 0
    for collection in ax.collections:
        points = ax.transData.transform(np.asarray(collection.get_offsets()))
        covered += sum(any(box.contains(x, y) for box in boxes) for x, y in points)
    return covered
