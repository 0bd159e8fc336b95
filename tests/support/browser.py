"""Open a page in headless Chromium (Debian's `chromium`) and report what a person would see go wrong.

A small Chrome DevTools Protocol client over `--remote-debugging-pipe` (NUL-separated JSON on fds 3 and 4), so no
WebSocket library and no browser download: console errors (`console.error`/`assert`), uncaught exceptions,
resources that failed to load, and images that did not decode, plus the page's `<h1>` as proof it rendered.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

IMAGES = """JSON.stringify({
  h1: (document.querySelector('h1') || {}).textContent || '',
  images: document.images.length + document.querySelectorAll('svg image').length,
  broken: Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)
    .concat(Array.from(document.querySelectorAll('svg image')).filter(i => {
      try { return i.getBBox().width === 0; } catch (e) { return true; } })
      .map(i => i.getAttribute('href') || i.getAttribute('xlink:href')))
})"""


@dataclass
class PageReport:
    h1: str = ""
    images: int = 0
    broken_images: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)  # console errors, exceptions, failed loads

    @property
    def problems(self) -> list[str]:
        return [*self.console_errors, *(f"image did not load: {src}" for src in self.broken_images)]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class _Pipe:
    def __init__(self, binary: str, profile: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:  # in the child: fd 3 is what it reads, fd 4 what it writes
            # copies at fd >= 10 first, so that placing one on 3 or 4 cannot overwrite the other
            reads, writes = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w))
            os.dup2(reads, 3)  # dup2's copies are inheritable (os.pipe's fds are close-on-exec)
            os.dup2(writes, 4)

        self.process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=wire, close_fds=False)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None,
             deadline: float) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))
            self.events.append(reply)

    def wait_for(self, method: str, *, deadline: float) -> None:
        if any(e.get("method") == method for e in self.events):
            return
        while True:
            event = self._read(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return

    def _read(self, deadline: float) -> dict[str, Any]:
        import select

        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._from_browser], [], [], remaining)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium exited ({self.process.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return dict(json.loads(message))

    def close(self) -> None:
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def _session(url: str, *, deadline: float) -> Iterator[tuple[_Pipe, str]]:
    """A headless Chromium with one tab on `url`, loaded (its load event fired)."""
    binary = chromium()
    if binary is None:
        raise RuntimeError("chromium is not installed (Debian: apt-get install -y chromium)")
    # ignore_cleanup_errors: a Chromium helper process that outlives the browser by a moment can still be writing
    # into the scratch profile while it is removed ("Directory not empty"), which says nothing about the page.
    with tempfile.TemporaryDirectory(prefix="skewgate-chromium-", ignore_cleanup_errors=True) as profile:
        pipe = _Pipe(binary, Path(profile))
        try:
            target = pipe.send("Target.createTarget", {"url": "about:blank"}, deadline=deadline)["targetId"]
            session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                deadline=deadline)["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                pipe.send(f"{domain}.enable", session=session, deadline=deadline)
            pipe.send("Page.navigate", {"url": url}, session=session, deadline=deadline)
            pipe.wait_for("Page.loadEventFired", deadline=deadline)
            yield pipe, session
        finally:
            pipe.close()


def _evaluate(pipe: _Pipe, session: str, expression: str, *, deadline: float) -> Any:
    result = pipe.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session,
                       deadline=deadline)
    return result["result"].get("value")


def visible_text(url: str, *, until: Callable[[str, str], bool], timeout_s: float = 90.0) -> tuple[str, str]:
    """(location, the page's visible text) once `until(location, text)` holds — a single-page app renders after its load
    event — or at the deadline, whichever comes first."""
    deadline = time.monotonic() + timeout_s
    expression = "JSON.stringify([location.href, document.body.innerText])"
    with _session(url, deadline=deadline) as (pipe, session):
        while True:
            href, text = json.loads(_evaluate(pipe, session, expression, deadline=deadline))
            if until(href, text) or time.monotonic() > deadline - 2:
                return str(href), str(text)
            time.sleep(0.5)


def render(page: Path, *, timeout_s: float = 60.0, settle_s: float = 0.5) -> PageReport:
    """Load `page` (a local file) and report its problems."""
    deadline = time.monotonic() + timeout_s
    with _session(page.resolve().as_uri(), deadline=deadline) as (pipe, session):
        time.sleep(settle_s)  # late console messages and image decodes
        seen = json.loads(_evaluate(pipe, session, IMAGES, deadline=deadline))
    report = PageReport(h1=seen["h1"], images=seen["images"], broken_images=list(seen["broken"]))
    for event in pipe.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in {"error", "assert"}:
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            report.console_errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            report.console_errors.append(
                f"exception: {details.get('exception', {}).get('description') or details.get('text', '')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            report.console_errors.append(f"log: {entry.get('text', '')} {entry.get('url', '')}".strip())
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            report.console_errors.append(f"failed to load ({params.get('errorText')}): {params.get('requestId')}")
    return report
