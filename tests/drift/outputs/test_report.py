"""The drift HTML report's coverage table: each cell shaded by how far the current share departs from the
reference's own share of that cell (not from 0.10), empty and NaN cells neutral, every header text."""

import re
from html.parser import HTMLParser

import numpy as np
import pytest

from skewgate.drift.core import DriftOptions, drift_gate
from skewgate.drift.outputs.report import ALARM, BINS, reference_shares, report_html
from skewgate.drift.stats.profile import ReferenceProfile
from tests.drift.conftest import make_frame, with_pixels_and_gaps

N = 2000
STREAMED = DriftOptions(exact_rows=500, sketch_capacity=256, permutation_max_rows=0, batch_rows=300)


class _Table(HTMLParser):
    """The coverage table as read: header texts, and per row its name and cells (class, style, text)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[tuple[str, dict, str]]]] = []
        self._cell: tuple[str, dict, list[str]] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in {"td", "th"} and self.tables:
            self._cell = (tag, dict(attrs), [])

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2].append(data)

    def handle_endtag(self, tag):
        if tag in {"td", "th"} and self._cell is not None:
            tag_, attrs, text = self._cell
            self.tables[-1][-1].append((tag_, attrs, "".join(text)))
            self._cell = None


def _coverage(page: str) -> tuple[list[str], dict[str, list[tuple[dict, str]]]]:
    parser = _Table()
    parser.feed(page)
    header, *rows = parser.tables[0]
    return [text for _, _, text in header], {r[0][2].lstrip("● "): [(a, t) for _, a, t in r[1:]] for r in rows}


def _shade(attrs: dict) -> float:
    found = re.search(r"rgba\(200,30,30,([0-9.]+)\)", attrs.get("style", ""))
    return float(found.group(1)) if found else 0.0


@pytest.fixture(scope="module", params=[DriftOptions(), STREAMED], ids=["in-memory", "streamed"])
def results(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("drift-report")
    paths = {}
    for name, frame in {"ref": make_frame(N, seed=1), "same": make_frame(N, seed=2),
                        "shifted": make_frame(N, seed=2, shift=0.6)}.items():
        paths[name] = folder / f"{name}.parquet"
        with_pixels_and_gaps(frame, seed=int(name != "ref")).to_parquet(paths[name])
    return {name: drift_gate(reference=paths["ref"], current=paths[name], options=request.param)
            for name in ("same", "shifted")}


def test_a_pass_has_no_alarming_cell(results):
    result = results["same"]
    assert result.verdict.status == "pass"
    header, rows = _coverage(report_html(result))
    assert {"pixel", "gappy", "f2"} <= set(rows)
    cells = [cell for row in rows.values() for cell in row]
    assert all(len(row) == len(BINS) for row in rows.values())
    assert not [c for c in cells if c[0].get("class") == "alarm"]
    assert max(_shade(a) for a, _ in cells) < 0.5  # nothing darker than pink: sampling noise only
    pixel = dict(zip(header[1:], rows["pixel"], strict=True))
    assert all(pixel[b][0].get("class") == "empty" and _shade(pixel[b][0]) == 0 for b in ["D1", "D6", "<min", "NaN"])
    assert float(pixel["D7"][1]) > 0.55 and _shade(pixel["D7"][0]) < 0.5  # the zeros: the reference's 0.6 too
    assert float(dict(zip(header[1:], rows["gappy"], strict=True))["NaN"][1]) > 0  # NaN in both: shaded as noise
    assert _shade(dict(zip(header[1:], rows["gappy"], strict=True))["NaN"][0]) < 0.5


def test_a_planted_shift_has_alarming_cells_in_its_row_only(results):
    result = results["shifted"]
    assert result.verdict.status == "fail"
    _, rows = _coverage(report_html(result))
    alarming = {name for name, row in rows.items() for attrs, _ in row if attrs.get("class") == "alarm"}
    assert alarming == {"f2"}
    assert max(_shade(a) for a, _ in rows["f2"]) == 1.0


def test_every_header_shows_as_text(results):
    page = report_html(results["same"])
    header, _ = _coverage(page)
    assert header == ["", *BINS] and header[1] == "<min" and header[-2] == ">max"
    assert "<th>&lt;min</th>" in page and "<th><min</th>" not in page


def test_the_reference_shares_are_the_reference_counted_like_the_current(results):
    """Counted on the reference itself the departure is nil: the shares a no-drift run compares with."""
    profile: ReferenceProfile = results["same"].profile
    shares = reference_shares(profile)
    assert shares.shape == (len(profile.numeric_names), len(BINS))
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, atol=1e-9)
    pixel = shares[profile.numeric_names.index("pixel")]
    assert pixel[1:7].tolist() == [0.0] * 6 and 0.6 < pixel[7] < 0.75  # six deciles empty, D7 from 0
    gappy = shares[profile.numeric_names.index("gappy")]
    assert gappy[12] == pytest.approx(profile.nan_share["gappy"]) and gappy[0] == gappy[11] == 0.0
    assert np.abs(shares[profile.numeric_names.index("f2"), 1:11] - 0.1).max() < 3 * profile.ks_error_bound + 1e-3


def test_cells_neither_side_fills_are_neutral_and_noise_is_not_alarming():
    from skewgate.drift.outputs.report import _cell

    assert 'class="empty"' in _cell(0.0, 0.0) and "rgba" not in _cell(0.0, 0.0)
    assert 'class="none"' in _cell(0.0, float("nan")) and "rgba" not in _cell(0.0, float("nan"))
    assert 'class="alarm"' in _cell(0.1 + ALARM, 0.1) and 'class="alarm"' in _cell(0.0, ALARM)
    assert "alarm" not in _cell(0.1 + ALARM / 2, 0.1)
    assert "alarm" not in _cell(0.16, 0.1, (200, 200))  # 6 points on 200 rows a side: within sampling noise
    assert 'class="alarm"' in _cell(0.16, 0.1, (100_000, 100_000))


@pytest.mark.parametrize("features", [1, 30], ids=["one-feature", "thirty-features"])
def test_the_heatmap_keeps_every_text_inside_the_figure(tmp_path, monkeypatch, features):
    """The colour bar's label was cut off beside a single row (the figure was as tall as the rows)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from skewgate.drift.outputs.report import heatmap_png
    from tests.support.figures import texts_outside_figure

    rng = np.random.default_rng(0)
    for name, shift in (("ref", 0.0), ("cur", 0.5)):
        pd.DataFrame({f"f{k}": rng.normal(shift, 1, 400) for k in range(features)}).to_parquet(
            tmp_path / f"{name}.parquet")
    result = drift_gate(reference=tmp_path / "ref.parquet", current=tmp_path / "cur.parquet", options=DriftOptions())
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    heatmap_png(result, tmp_path / "heatmap.png")
    (figure,) = figures
    figure.canvas.draw()
    assert texts_outside_figure(figure) == []
    assert figure.axes[1].get_ylabel() == "share of current rows"  # the colour bar's
