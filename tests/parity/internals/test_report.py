"""Pictures of parity as a person reads them: the per-layer plot keeps every text inside the figure and its notes
off the points they name, labels its axes and explains its markers; the HTML shows each pair's own criterion."""

import pytest

from skewgate.common.verdict import Check, Verdict
from skewgate.parity.core import FP32, INT8, ParityResult
from skewgate.parity.internals.report import layer_figure, report_html
from tests.support.figures import texts_outside_figure


def _rows(count, *, diverge_at, metric):
    """`count` compared values (long module names, as a transformer's), diverging from `diverge_at` on."""
    rows = []
    for k in range(count):
        diverged = k >= diverge_at
        rows.append({"depth": k, "value": f"v{k}", "module": f"encoder.layer.{k}.attention.output.dense",
                     "module_type": "Linear", "op": "MatMul", "max_abs": 1e-6, "diverged": diverged,
                     "worst_ratio": (30.0 if diverged else 0.01) if metric == "ratio" else 1000.0,
                     "sqnr_db": (12.0 if diverged else 45.0) if metric == "sqnr" else None})
    return rows


def _result(diverge_at, count=40):
    fp32, int8 = _rows(count, diverge_at=diverge_at, metric="ratio"), _rows(count, diverge_at=count, metric="sqnr")
    first = fp32[diverge_at]
    verdict = Verdict.from_checks("parity", [Check("layers.torch_vs_fp32", passed=False)], subject=None,
                                  details={FP32: {"first_divergence": {k: first[k] for k in
                                                                       ("value", "module", "module_type", "op")}}})
    return ParityResult(verdict=verdict, layers={FP32: fp32, INT8: int8})


@pytest.mark.parametrize("diverge_at", [0, 20, 39], ids=["first-value", "middle", "last-value"])
def test_the_layer_plot_keeps_its_texts_inside_and_off_the_points(diverge_at):
    figure = layer_figure(_result(diverge_at))
    figure.canvas.draw()
    fp32, _int8 = figure.axes
    assert texts_outside_figure(figure) == []
    assert list(fp32.texts) == []  # no note in the panel, over the points or off its edge
    # the first divergence is named in the title and marked at its value
    assert fp32.get_title().splitlines()[1].startswith(
        f"first divergence: encoder.layer.{diverge_at}.attention.output.dense (Linear)")
    (marker,) = [line for line in fp32.lines if line.get_label() == "first divergence"]
    assert list(marker.get_xdata()) == [diverge_at, diverge_at]


def test_the_layer_plot_labels_its_axes_and_explains_its_markers():
    figure = layer_figure(_result(30))
    fp32, int8 = figure.axes
    assert fp32.get_xlabel() and int8.get_xlabel()
    assert fp32.get_ylabel() == "max |error| / tolerance" and int8.get_ylabel() == "SQNR (dB)"
    assert [t.get_text() for t in fp32.get_legend().get_texts()] == ["within its limit", "diverged",
                                                                     "tolerance (ratio 1)", "first divergence"]
    assert [t.get_text() for t in int8.get_legend().get_texts()] == ["within its limit", "diverged"]


def test_the_html_shows_err_over_tolerance_only_where_the_tolerance_judges():
    page = report_html(_result(30))
    fp32, int8 = page.split("<h2>")[1:]
    assert "<th>err/tol</th>" in fp32 and "<td>30</td>" in fp32
    # INT8 rows are judged by SQNR: their err/tol against the FP32 tolerance (here 1000) would read as a failure
    assert "err/tol" not in int8 and "<td>1000</td>" not in int8 and "<th>SQNR dB</th>" in int8
    assert "judged by SQNR" in int8
