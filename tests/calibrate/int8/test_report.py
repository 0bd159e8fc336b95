"""Pictures of calibration: the histogram figure (which tensors get a panel, in which order, what each panel says)
and the HTML report's tables (columns, cell formats, escaping), read back from the figure objects and the page."""

import html.parser
import math

import numpy as np
import pytest

from skewgate.calibrate.core import CalibrationResult
from skewgate.calibrate.int8.collect import BINS, Histogram
from skewgate.calibrate.int8.report import PANELS, histogram_plot, report_html
from skewgate.common.verdict import Check, Verdict

PNG = b"\x89PNG\r\n\x1a\n"


def tensor(name, *, outlier=False, ratio=2.0, low=-1.0, high=1.0, aside=(), **extra):
    return {"tensor": name, "outlier": outlier, "max_over_p9999": ratio, "low": low, "high": high,
            "method": "percentile", "set_aside_samples": list(aside), "kurtosis": 3.0, "clipped": 0.00125,
            "min": -2.0, "max": 2.5, "eval_outside": 0.0, "quantized": True, **extra}


def result(tensors, *, layers=(), trials=(), coverage=None, passed=True, below=0, above=0):
    checks = [Check("accuracy_drop", passed=passed, value=0.02, limit=0.01, detail="drop 0.02 > 0.01")]
    details = {"int8_coverage": coverage} if coverage is not None else {}
    verdict = Verdict.from_checks("calibrate", checks, subject=None, versions={}, details=details)
    counts = np.geomspace(1e4, 1, BINS).astype(np.int64)
    return CalibrationResult(verdict=verdict, tensors=list(tensors), trials=list(trials), layers=list(layers),
                             histograms={t["tensor"]: Histogram(-3.0, 3.0, counts.copy(), below, above)
                                         for t in tensors}, ranges={})


@pytest.fixture
def drawn(monkeypatch):
    """Run histogram_plot and keep the figure it closes."""
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)

    def draw(res, path):
        returned = histogram_plot(res, path)
        [figure] = figures
        return returned, figure

    return draw


# --- histogram_plot ---


def test_the_figure_is_a_png_at_the_path_given_even_without_a_suffix(tmp_path, drawn):
    path = tmp_path / "kfp" / "outputs" / "plot"  # KFP output paths: no suffix, parents not there yet
    returned, _ = drawn(result([tensor("x")], layers=[{"value": "a", "op": "Conv", "sqnr_db": 30.0}]), str(path))
    assert returned == path and path.read_bytes()[:8] == PNG


def test_flagged_tensors_come_first_then_the_widest(tmp_path, drawn):
    tensors = [tensor("calm", ratio=1.5), tensor("wide", ratio=40.0), tensor("flagged_narrow", outlier=True,
                                                                              ratio=1.1),
               tensor("flagged_wide", outlier=True, ratio=300.0), tensor("inf", ratio=math.inf)]
    _, figure = drawn(result(tensors), tmp_path / "p.png")
    titles = [ax.get_title().split(":")[0] for ax in figure.axes[:-1]]
    assert titles == ["flagged_wide", "flagged_narrow", "inf", "wide", "calm"]


def test_at_most_panels_tensors_and_the_sqnr_panel(tmp_path, drawn):
    tensors = [tensor(f"t{i}", ratio=float(i)) for i in range(PANELS + 3)]
    _, figure = drawn(result(tensors), tmp_path / "p.png")
    assert len(figure.axes) == PANELS + 1
    assert [ax.get_title().split(":")[0] for ax in figure.axes[:-1]] == [f"t{i}" for i in
                                                                         range(PANELS + 2, 2, -1)]


def test_a_panel_shows_the_chosen_range_and_says_its_figures(tmp_path, drawn):
    row = tensor("conv1.out", ratio=12.345, low=-0.5, high=2.0, kurtosis=7.89, clipped=0.00125)
    _, figure = drawn(result([row]), tmp_path / "p.png")
    ax = figure.axes[0]
    assert ax.get_title() == "conv1.out: max/p99.99 12.3×, kurtosis 7.9, clipped 0.125%"
    assert ax.get_yscale() == "log"
    assert sorted(line.get_xdata()[0] for line in ax.lines) == [-0.5, 2.0]  # the clip range's two edges
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["range (percentile)"]


def test_values_beyond_the_histogram_are_counted_in_the_title(tmp_path, drawn):
    row = tensor("x", aside=[10, 60])
    _, figure = drawn(result([row], below=3, above=4), tmp_path / "p.png")
    assert figure.axes[0].get_title().endswith("; 7 values beyond (set-aside samples [10, 60])")


def test_an_unbounded_ratio_is_drawn_as_inf(tmp_path, drawn):
    _, figure = drawn(result([tensor("x", ratio=math.inf, outlier=True)]), tmp_path / "p.png")
    assert figure.axes[0].get_title().startswith("x: max/p99.99 inf×")


def test_the_sqnr_panel_has_a_bar_per_compared_layer(tmp_path, drawn):
    layers = [{"value": "a", "op": "Conv", "sqnr_db": 31.0}, {"value": "b", "op": "Relu", "sqnr_db": None},
              {"value": "c", "op": "Gemm", "sqnr_db": 18.5}]
    _, figure = drawn(result([tensor("x")], layers=layers, passed=False), tmp_path / "p.png")
    ax = figure.axes[-1]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a (Conv)", "c (Gemm)"]  # identical (None): no bar
    assert [p.get_height() for p in ax.patches] == [31.0, 18.5]
    assert ax.get_ylabel() == "SQNR dB"
    assert figure._suptitle.get_text() == "calibrate: FAIL"


def test_a_panel_names_the_module_that_made_its_tensor_and_labels_its_axes(tmp_path, drawn):
    from tests.support.figures import texts_outside_figure

    layers = [{"value": "gelu_1", "op": "Gelu", "module": "features.2", "sqnr_db": 33.0}]
    _, figure = drawn(result([tensor("gelu_1"), tensor("unknown")], layers=layers), tmp_path / "p.png")
    named, unnamed, sqnr = figure.axes
    assert named.get_title().startswith("gelu_1 (Gelu in features.2): max/p99.99")
    assert unnamed.get_title().startswith("unknown: max/p99.99")  # not among the compared values: as it is
    for ax in (named, unnamed, sqnr):
        assert ax.get_xlabel() and ax.get_ylabel(), ax.get_title()
    figure.canvas.draw()
    assert texts_outside_figure(figure) == []


def test_no_tensor_still_draws_the_sqnr_panel(tmp_path, drawn):
    _, figure = drawn(result([], layers=[{"value": "a", "op": "Conv", "sqnr_db": 30.0}]), tmp_path / "p.png")
    assert len(figure.axes) == 1 and (tmp_path / "p.png").read_bytes()[:8] == PNG


# --- report_html ---


class Tables(html.parser.HTMLParser):
    """Each `<h2>` title → its table's rows of cell texts (the header row first)."""

    def __init__(self, page):
        super().__init__()
        self.tables, self._title, self._cell, self._in = {}, None, None, None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag == "h2":
            self._in = "h2"
            self._title = ""
        elif tag == "tr":
            self.tables[self._title].append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "h2":
            self._in = None
            self.tables[self._title] = []
        elif tag in ("td", "th"):
            self.tables[self._title][-1].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._in == "h2":
            self._title += data
        elif self._cell is not None:
            self._cell += data


TRIALS_TITLE = "accuracy-budget trials (each judged on the INT8 file as deployed)"
COVERAGE_TITLE = "INT8 coverage by op type (nodes)"
LAYERS_TITLE = "per-layer SQNR (diagnostic: intermediates exposed, so ORT's Q/DQ fusions are off)"


def test_the_report_has_its_four_tables_in_order_with_their_columns():
    tables = Tables(report_html(result([tensor("x")]))).tables
    assert list(tables) == [TRIALS_TITLE, COVERAGE_TITLE, "tensors", LAYERS_TITLE]
    assert tables[TRIALS_TITLE][0] == ["trial", "tried", "excluded", "reduce_range", "kept", "drop",
                                       "accuracy_int8", "top1_agreement", "kl_divergence"]
    assert tables[COVERAGE_TITLE] == [["op", "int8", "fp32"]]  # no coverage in the details: no rows
    assert tables["tensors"][0] == ["tensor", "method", "low", "high", "min", "max", "max_over_p9999", "kurtosis",
                                    "quantized", "clipped", "eval_outside", "set_aside_samples", "outlier"]
    assert tables[LAYERS_TITLE] == [["value", "op", "module", "sqnr_db", "introduced_db"]]


def test_trial_cells_format_floats_lists_none_and_booleans():
    trials = [{"trial": 0, "tried": "nothing", "excluded": [], "reduce_range": False, "kept": True,
               "drop": 0.0123456789, "accuracy_int8": None, "top1_agreement": 0.987654321,
               "kl_divergence": 1.5e-7},
              {"trial": 1, "tried": "conv2 (loses 9 dB)", "excluded": ["conv1", "conv2"], "reduce_range": True,
               "kept": False, "drop": 0.5, "accuracy_int8": 0.25, "top1_agreement": 1.0, "kl_divergence": 0.0}]
    rows = Tables(report_html(result([], trials=trials))).tables[TRIALS_TITLE][1:]
    assert rows == [["0", "nothing", "", "False", "True", "0.01235", "", "0.9877", "1.5e-07"],
                    ["1", "conv2 (loses 9 dB)", "conv1, conv2", "True", "False", "0.5", "0.25", "1", "0"]]


def test_coverage_rows_come_from_the_verdicts_op_types_with_blank_missing_counts():
    coverage = {"mac_share": 0.4, "op_types": {"Conv": {"int8": 3, "fp32": 1}, "LSTM": {"fp32": 2}}}
    rows = Tables(report_html(result([], coverage=coverage))).tables[COVERAGE_TITLE][1:]
    assert rows == [["Conv", "3", "1"], ["LSTM", "", "2"]]


def test_user_names_are_escaped_and_read_back_as_written():
    name = "<script>alert(1)</script> & a\"b"
    trials = [{"trial": 1, "tried": f"{name} (why)", "excluded": [name]}]
    page = report_html(result([tensor(name)], trials=trials,
                              layers=[{"value": name, "op": "Conv", "module": "m<1>", "sqnr_db": 20.0,
                                       "introduced_db": -3.25}]))
    assert "<script>" not in page
    tables = Tables(page).tables
    assert tables["tensors"][1][0] == name
    assert tables[TRIALS_TITLE][1][:3] == ["1", f"{name} (why)", name]
    assert tables[LAYERS_TITLE][1] == [name, "Conv", "m<1>", "20", "-3.25"]


def test_tensor_rows_show_their_figures():
    row = tensor("x", ratio=math.inf, outlier=True, aside=[10, 60], eval_outside=None, clipped=1e-5,
                 quantized=False)
    cells = Tables(report_html(result([row]))).tables["tensors"][1]
    assert cells == ["x", "percentile", "-1", "1", "-2", "2.5", "inf", "3", "False", "1e-05", "", "10, 60", "True"]


def test_the_page_opens_with_the_verdict():
    page = report_html(result([], passed=False))
    assert "<h1>calibrate: FAIL</h1>" in page and "drop 0.02 &gt; 0.01" in page
    assert page.index("<h1>") < page.index(f"<h2>{TRIALS_TITLE}</h2>")
