"""The one escaper: whatever a model, a data set or a user named stays text in every Markdown the project writes."""

import pytest
from markdown import markdown as render

from skewgate.common.markdown import cell, escape


@pytest.mark.parametrize("text", [
    pytest.param("<img src=x onerror=alert(1)>", id="html"),
    pytest.param("[click](javascript:alert(1))", id="link"),
    pytest.param("**bold** _it_ `code` # head", id="emphasis"),
])
def test_escaped_text_renders_as_the_same_text(text):
    import html

    rendered = render(escape(text))
    assert "<img" not in rendered and "<a " not in rendered and "<strong>" not in rendered
    assert html.unescape(rendered.removeprefix("<p>").removesuffix("</p>")) == text


def test_a_cell_holds_no_line_break():
    assert "\n" not in cell("one\ntwo\r\nthree") and cell("x|y") == "x\\|y"
