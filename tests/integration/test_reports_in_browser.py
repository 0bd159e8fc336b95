"""The drift, parity and calibrate HTML reports as a person opens them: rendered in headless Chromium (Debian's
`chromium`), with no console error, no uncaught exception, no failed load and no broken image; the drift report's
coverage table as drawn (header texts, cell shades)."""

import json
import time

import pytest

from skewgate.cli import main
from tests.calibrate import models as calibrate_models
from tests.drift.conftest import make_frame, with_pixels_and_gaps
from tests.parity.models import build as build_parity_model
from tests.support.browser import _evaluate, _session, chromium, render

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def _browser():
    if chromium() is None:
        pytest.skip("needs chromium, from the Debian package (.ci/run installs it): apt-get install -y chromium")


def _drift(tmp_path):
    ref, cur = tmp_path / "ref.parquet", tmp_path / "cur.parquet"
    make_frame(800, seed=1).to_parquet(ref)
    make_frame(800, seed=2, shift=0.6).to_parquet(cur)  # a drifted page: the fuller report
    assert main(["drift", "--reference", str(ref), "--current", str(cur), "--html", str(tmp_path / "r.html")]) == 1
    return tmp_path / "r.html", "drift: FAIL"


def _parity(tmp_path):
    model = build_parity_model(tmp_path)
    code = main(["parity", "--torch", str(model["pt2"]), "--onnx", str(model["onnx"]), "--inputs",
                 str(model["inputs"]), "--layerwise", "--html", str(tmp_path / "p.html")])
    assert code == 0
    return tmp_path / "p.html", "parity: PASS"


def _calibrate(tmp_path):
    onnx = calibrate_models.build(tmp_path, hazard="none")
    code = main(["calibrate", "--onnx", str(onnx), "--calibration",
                 str(calibrate_models.calibration_set(tmp_path / "calibration.npz")), "--eval",
                 str(calibrate_models.labelled_eval(onnx, tmp_path / "eval.npz")), "--out",
                 str(tmp_path / "m.int8.onnx"), "--html", str(tmp_path / "c.html")])
    assert code == 0
    return tmp_path / "c.html", "calibrate: PASS"


@pytest.mark.parametrize("make", [_drift, _parity, _calibrate], ids=["drift", "parity", "calibrate"])
def test_report_renders_cleanly_in_chromium(tmp_path, make):
    page, heading = make(tmp_path)
    report = render(page)
    assert report.h1 == heading  # it rendered: the page's own heading, read back from the live DOM
    assert report.problems == []


def test_the_browser_check_sees_console_errors_and_broken_images(tmp_path):
    """The check can fail: a page with a missing image, a failing script and a console error."""
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><html><body><h1>broken</h1><img src='missing.png'>"
                    "<script>console.error('report error'); undefinedFunction();</script></body></html>")
    report = render(page)
    assert report.h1 == "broken" and report.images == 1
    assert report.broken_images == [(tmp_path / "missing.png").as_uri()]
    assert any("console.error: report error" in p for p in report.problems)
    assert any("undefinedFunction" in p for p in report.problems)
    assert any("ERR_FILE_NOT_FOUND" in p for p in report.problems)


COVERAGE = """JSON.stringify((() => {
  const rows = Array.from(document.querySelector('table').rows);
  const alpha = (td) => {
    const parts = (getComputedStyle(td).backgroundColor.match(/\\(([^)]*)\\)/) || [0, '0,0,0,0'])[1].split(',');
    return parts.length === 4 ? Number(parts[3]) : 1;
  };
  return {
    header: Array.from(rows[0].cells).map(c => c.innerText),
    rows: rows.slice(1).map(r => ({
      name: r.cells[0].innerText.replace('\u25cf ', ''),
      darkest: Math.max(...Array.from(r.querySelectorAll('td')).map(alpha)),
      outlined: Array.from(r.querySelectorAll('td')).filter(td => getComputedStyle(td).outlineStyle !== 'none').length,
    })),
  };
})())"""


def _coverage_as_drawn(page):
    """The drift report's coverage table as Chromium draws it: header texts; per row its darkest cell's alpha and
    its outlined (alarming) cells."""
    deadline = time.monotonic() + 60
    with _session(page.resolve().as_uri(), deadline=deadline) as (pipe, session):
        seen = json.loads(_evaluate(pipe, session, COVERAGE, deadline=deadline))
    return seen["header"], {row["name"]: row for row in seen["rows"]}


@pytest.mark.parametrize(("shift", "code", "alarming"), [(0.0, 0, set()), (0.6, 1, {"f2"})], ids=["pass", "shifted"])
def test_drift_coverage_is_red_only_where_the_current_data_left_the_reference(tmp_path, shift, code, alarming):
    """Zero-filled deciles, NaN, `<min`/`>max` at 0: a PASS draws no alarming cell; a planted shift draws them in
    its feature's row only; the `<min` header reads as text."""
    ref, cur = tmp_path / "ref.parquet", tmp_path / "cur.parquet"
    with_pixels_and_gaps(make_frame(800, seed=1), seed=0).to_parquet(ref)
    with_pixels_and_gaps(make_frame(800, seed=2, shift=shift), seed=1).to_parquet(cur)
    page = tmp_path / "r.html"
    assert main(["drift", "--reference", str(ref), "--current", str(cur), "--html", str(page)]) == code
    assert render(page).problems == []
    header, rows = _coverage_as_drawn(page)
    assert header[1:] == ["<min", *[f"D{i}" for i in range(1, 11)], ">max", "NaN"]
    assert {"pixel", "gappy"} <= set(rows)
    assert {name for name, row in rows.items() if row["outlined"]} == alarming
    assert all(row["darkest"] < 0.5 for name, row in rows.items() if name not in alarming)
    assert all(rows[name]["darkest"] == 1 for name in alarming)
