from pathlib import Path

from skewgate.common.publishing import html_page, publish, write_text
from skewgate.common.verdict import Check, Verdict


class RecordingRun:
    """Stands in for an MLflow StepRun: records what would be logged."""

    def __init__(self):
        self.tables, self.artifacts = {}, {}

    def log_table(self, artifact_file, rows):
        self.tables[artifact_file] = rows

    def log_artifact_as(self, source, name):
        self.artifacts[name] = Path(source).read_text(encoding="utf-8")


def test_page_shows_status_each_check_and_escapes_text():
    verdict = Verdict.from_checks("drift", [Check("ks", passed=False, detail="x<y"),
                                            Check("cov", passed=False, severity="warn", detail="thin")],
                                  subject=None)
    page = html_page(verdict, "<table></table>")
    assert "<h1>drift: FAIL</h1>" in page and "<b>ks</b>: FAIL — x&lt;y" in page and "<b>cov</b>: WARN" in page
    assert page.endswith("<table></table></body></html>")


def test_publish_writes_what_has_a_path_and_logs_it_under_its_name(tmp_path):
    run = RecordingRun()
    publish(run, tables={"rows.json": [{"a": 1}]},
            outputs=[(tmp_path / "sub" / "r.html", "report.html", write_text(lambda: "hello")),
                     (None, "plot.png", lambda path: path.write_text("never"))])
    assert (tmp_path / "sub" / "r.html").read_text() == "hello"
    assert run.artifacts == {"report.html": "hello"} and run.tables == {"rows.json": [{"a": 1}]}


def test_publish_without_tracking_only_writes(tmp_path):
    publish(None, tables={"rows.json": []}, outputs=[(tmp_path / "r.html", "", write_text(lambda: "x"))])
    assert (tmp_path / "r.html").read_text() == "x"


# --- plots: tick labels rendered as mathtext (10⁵, not `$\mathdefault{10^{5}}$`), user strings printed as written ---

USER = r"blocks.$x_1$\w"  # a module / tensor name with `$`, `_` and a backslash: must print exactly so


def _rendered(text):
    """What matplotlib draws for a Text: (string, parsed as mathtext?)."""
    return text._preprocess_math(text.get_text())


def _drawn_figures(monkeypatch, draw):
    """Run `draw(path)` and keep the figures it closes, drawn as they were saved."""
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    draw()
    for figure in figures:
        figure.canvas.draw()
    return figures


def _texts(figure):
    texts = [figure._suptitle] if figure._suptitle is not None else []
    for ax in figure.axes:
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.get_xticklabels(), *ax.get_yticklabels(), *ax.texts]
        legend = ax.get_legend()
        if legend is not None:
            texts += legend.get_texts()
    return [t for t in texts if t.get_text()]


def _assert_readable(figure, *, log_axes):
    log_labels = [label for ax in figure.axes if ax.get_yscale() in ("log", "symlog")
                  for label in ax.get_yticklabels() if label.get_text()]
    assert len(log_labels) >= 2 * log_axes
    rendered = [_rendered(label) for label in log_labels]
    # 10⁵ is drawn from `$\mathdefault{10^{5}}$` as mathtext; with mathtext off those characters are printed
    assert any("\\mathdefault" in drawn for drawn, _ in rendered)
    assert all(math is True for drawn, math in rendered if "$" in drawn), rendered
    for text in _texts(figure):
        drawn, math = _rendered(text)
        if USER in drawn:
            assert math is False  # printed as written, no formula
        else:
            assert "$" not in drawn or math is True, f"raw mathtext would print: {drawn!r}"


def _parity_result():
    from skewgate.parity.core import FP32, INT8, ParityResult

    def row(i, ratio, sqnr, diverged=False):
        return {"depth": i, "value": f"v{i}", "module": USER if i == 2 else f"layer{i}", "module_type": "Conv2d",
                "op": "Conv", "max_abs": ratio, "worst_ratio": ratio, "sqnr_db": sqnr, "diverged": diverged}

    fp32 = [row(i, r, None, r > 1) for i, r in enumerate([1e-3, 0.5, 40.0, 2e5])]
    int8 = [row(i, None, s, s < 20) for i, s in enumerate([45.0, 38.0, 12.0, 30.0])]
    verdict = Verdict.from_checks("parity", [Check("layers", passed=False)], subject=None, versions={},
                                  details={FP32: {"first_divergence": fp32[2]}, INT8: {"first_divergence": int8[2]}})
    return ParityResult(verdict=verdict, layers={FP32: fp32, INT8: int8})


def test_parity_plot_log_ticks_render_and_module_names_print_as_written(tmp_path, monkeypatch):
    from skewgate.parity.internals.report import layer_plot

    path = tmp_path / "layer_errors.png"
    (figure,) = _drawn_figures(monkeypatch, lambda: layer_plot(_parity_result(), path))
    _assert_readable(figure, log_axes=1)
    drawn = [_rendered(t)[0] for t in _texts(figure)]
    assert f"{USER}:Conv" in drawn
    assert f"PyTorch vs ONNX Runtime FP32\nfirst divergence: {USER} (Conv2d), ONNX Conv" in drawn
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_calibrate_histograms_log_counts_render_and_tensor_names_print_as_written(tmp_path, monkeypatch):
    import numpy as np

    from skewgate.calibrate.core import CalibrationResult
    from skewgate.calibrate.int8.collect import BINS, Histogram
    from skewgate.calibrate.int8.report import histogram_plot

    counts = np.random.default_rng(0).poisson(np.geomspace(1e5, 1, BINS)).astype(np.int64)
    tensors = [{"tensor": name, "outlier": name == USER, "max_over_p9999": 3.0, "low": -1.0, "high": 1.0,
                "method": "percentile", "set_aside_samples": 0, "kurtosis": 4.2, "clipped": 0.001}
               for name in (USER, "fc.out")]
    verdict = Verdict.from_checks("calibrate", [Check("budget", passed=True)], subject=None, versions={})
    result = CalibrationResult(verdict=verdict, tensors=tensors, trials=[],
                               layers=[{"value": USER, "op": "Conv", "sqnr_db": 31.0}],
                               histograms={t["tensor"]: Histogram(-2.0, 2.0, counts) for t in tensors}, ranges={})
    path = tmp_path / "histograms.png"
    (figure,) = _drawn_figures(monkeypatch, lambda: histogram_plot(result, path))
    _assert_readable(figure, log_axes=2)
    drawn = [_rendered(t)[0] for t in _texts(figure)]
    assert any(d.startswith(f"{USER}: max/p99.99") for d in drawn) and f"{USER} (Conv)" in drawn
