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
