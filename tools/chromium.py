"""Headless Chromium driven over its DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages separated by NUL bytes on file descriptors 3 and 4; no websocket, no extra package).

One :class:`Chromium` is one browser process; :meth:`Chromium.page` opens a page at a viewport width and
returns a :class:`Page` that loads files, evaluates JavaScript and takes PNG screenshots. Used by the HTML
report tests (``tests/reports``) and by ``tools/screenshots.py``. Layout facts a person would notice are
measured by :data:`LAYOUT_JS` (see :func:`layout_facts`)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

BINARY_NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_binary() -> str | None:
    """The first Chromium on PATH (Debian's package installs ``chromium``), else None."""
    for name in BINARY_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class ChromiumError(RuntimeError):
    pass


class Chromium:
    """A headless Chromium process; use as a context manager (the process and its profile are removed)."""

    def __init__(self, binary: str | None = None, timeout: float = 60.0):
        self.binary = binary or find_binary()
        if self.binary is None:
            raise ChromiumError("no Chromium on PATH (apt-get install chromium)")
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="w8a8-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # the browser reads fd 3 and writes fd 4: dup the pipe ends there in the child only (and keep 3, 4 open:
        # Popen closes the descriptors not in pass_fds after preexec_fn ran)
        def _fds():
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)
        self._proc = subprocess.Popen(
            [self.binary, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check", "--hide-scrollbars",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-extensions", "--mute-audio", f"--user-data-dir={self._profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4, to_browser_r, from_browser_w), preexec_fn=_fds)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (ChromiumError, OSError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def _read_message(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChromiumError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise ChromiumError("Chromium closed its DevTools pipe")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """One DevTools command; its result (events that arrive meanwhile are kept for :meth:`wait_event`)."""
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise ChromiumError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self._events.append(reply)

    def wait_event(self, method: str, session: str) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            for i, ev in enumerate(self._events):
                if ev.get("method") == method and ev.get("sessionId") == session:
                    return self._events.pop(i)
            ev = self._read_message(deadline)
            if "method" in ev:
                self._events.append(ev)

    def page(self, width: int = 1280, height: int = 900) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, target, session)
        self.send("Page.enable", session=session)
        page.resize(width, height)
        return page


class Page:
    def __init__(self, browser: Chromium, target: str, session: str):
        self.browser, self.target, self.session = browser, target, session
        self.width = self.height = 0

    def _send(self, method, params=None):
        return self.browser.send(method, params, session=self.session)

    def resize(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self._send("Emulation.setDeviceMetricsOverride",
                   {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def load(self, path: str | Path) -> None:
        """Open a local file and wait for its load event (images decoded, scripts run)."""
        self._send("Page.navigate", {"url": Path(path).resolve().as_uri()})
        self.browser.wait_event("Page.loadEventFired", self.session)

    def evaluate(self, expression: str):
        res = self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            raise ChromiumError(f"script failed: {res['exceptionDetails'].get('exception', {}).get('description')}")
        return res["result"].get("value")

    def screenshot(self, max_height: int | None = None, scale: float = 1.0) -> bytes:
        """A PNG of the page at the current width: the whole page, or its top ``max_height`` CSS pixels, scaled
        by ``scale`` (0.5: half as many pixels each way)."""
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
        if max_height:
            height = min(height, max_height)
        clip = {"x": 0, "y": 0, "width": self.width, "height": height, "scale": scale}
        data = self._send("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True})
        return base64.b64decode(data["data"])

    def close(self) -> None:
        self.browser.send("Target.closeTarget", {"targetId": self.target})


# Layout facts of the loaded page, as JSON. Text boxes are the client rects of every visible text node outside
# figures, clipped by the ancestors that clip overflow; figures are every img / svg / canvas.
LAYOUT_JS = r"""
(() => {
  const vw = document.documentElement.clientWidth;
  const describe = el => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += '#' + el.id;
    if (el.className && typeof el.className === 'string') s += '.' + el.className.trim().split(/\s+/).join('.');
    return s;
  };
  const scrolls = el => { const o = getComputedStyle(el).overflowX; return o === 'auto' || o === 'scroll'; };
  const clips = el => getComputedStyle(el).overflowX !== 'visible' || getComputedStyle(el).overflowY !== 'visible';
  const visible = el => { const cs = getComputedStyle(el); return cs.display !== 'none' && cs.visibility !== 'hidden'; };
  const wide = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (!visible(el) || el.closest('svg') && el.tagName.toLowerCase() !== 'svg') continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.right <= vw + 1 && r.left >= -1) continue;
    let a = el.parentElement, inside = null;
    while (a && a !== document.body) { if (scrolls(a)) { inside = a; break; } a = a.parentElement; }
    const ar = inside && inside.getBoundingClientRect();
    wide.push({el: describe(el), right: Math.round(r.right), left: Math.round(r.left),
               in_scroll_box: !!(inside && ar.right <= vw + 1 && ar.left >= -1),
               text: (el.textContent || '').trim().slice(0, 60)});
  }
  const clipOf = node => {
    let box = {l: -1e9, t: -1e9, r: 1e9, b: 1e9};
    for (let a = node.parentElement; a; a = a.parentElement) {
      if (a === document.documentElement) break;
      if (clips(a)) { const q = a.getBoundingClientRect();
        box = {l: Math.max(box.l, q.left), t: Math.max(box.t, q.top), r: Math.min(box.r, q.right), b: Math.min(box.b, q.bottom)}; }
    }
    return box;
  };
  const boxes = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let n = 0;
  for (let t = walker.nextNode(); t; t = walker.nextNode()) {
    if (!t.textContent.trim() || !t.parentElement || t.parentElement.closest('svg,script,style') || !visible(t.parentElement)) continue;
    const c = clipOf(t); const range = document.createRange(); range.selectNodeContents(t);
    n += 1;
    for (const r of range.getClientRects()) {
      const l = Math.max(r.left, c.l), tp = Math.max(r.top, c.t), rr = Math.min(r.right, c.r), b = Math.min(r.bottom, c.b);
      if (rr - l > 0.5 && b - tp > 0.5) boxes.push({node: n, l, t: tp, r: rr, b, text: t.textContent.trim().slice(0, 40)});
    }
  }
  boxes.sort((p, q) => p.t - q.t);
  const overlaps = [];
  for (let i = 0; i < boxes.length && overlaps.length < 20; i++) {
    const p = boxes[i];
    for (let j = i + 1; j < boxes.length && boxes[j].t < p.b - 2; j++) {
      const q = boxes[j];
      if (q.node === p.node) continue;
      const w = Math.min(p.r, q.r) - Math.max(p.l, q.l), h = Math.min(p.b, q.b) - Math.max(p.t, q.t);
      if (w > 2 && h > 2) overlaps.push({a: p.text, b: q.text, w: Math.round(w), h: Math.round(h)});
    }
  }
  const figures = [];
  for (const el of document.querySelectorAll('img, svg, canvas')) {
    if (el.tagName.toLowerCase() === 'svg' && el.parentElement.closest('svg')) continue;
    const r = el.getBoundingClientRect();
    const f = {el: describe(el), kind: el.tagName.toLowerCase(), width: Math.round(r.width), height: Math.round(r.height),
               label: el.getAttribute('aria-label') || el.getAttribute('alt') || ''};
    if (f.kind === 'img') {
      f.natural = [el.naturalWidth, el.naturalHeight]; f.complete = el.complete;
      let distinct = 0;
      try {
        const c = document.createElement('canvas'); c.width = el.naturalWidth; c.height = el.naturalHeight;
        const g = c.getContext('2d'); g.drawImage(el, 0, 0);
        const d = g.getImageData(0, 0, c.width, c.height).data, seen = new Set();
        for (let i = 0; i < d.length && seen.size < 64; i += 4 * 97) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
        distinct = seen.size;
      } catch (e) { distinct = -1; }
      f.colors = distinct;
    } else if (f.kind === 'svg') {
      f.shapes = el.querySelectorAll('path, rect, circle, line, polyline, polygon, use').length;
      f.panels = [...el.querySelectorAll('g[id^="axes_"]')].map(ax => ({
        title: [...ax.querySelectorAll('text')].map(t => t.textContent).join(' ').slice(0, 60),
        bars: ax.querySelectorAll('[id^="bar-"]').length,
        bins: new Set([...ax.querySelectorAll('[id^="bar-"]')].map(b => b.id.replace(/-\d+$/, ''))).size}));
    } else {
      f.natural = [el.width, el.height];
    }
    figures.push(f);
  }
  return {viewport: vw, page_width: document.documentElement.scrollWidth, wide, overlaps, text_boxes: boxes.length,
          figures, groups: document.querySelectorAll('#groups tbody tr').length};
})()
"""


def layout_facts(page: Page) -> dict:
    """The loaded page's layout facts: ``viewport`` and ``page_width`` (CSS px), ``wide`` (elements reaching
    past the viewport; ``in_scroll_box`` when inside a horizontally scrolling box that fits), ``overlaps``
    (pairs of text boxes that overlap by more than 2 px each way), ``figures`` (each img / svg / canvas:
    rendered size; natural size and colour count of images; panels of inline-SVG plots with their bars),
    ``groups`` (rows of the failure-group table)."""
    return page.evaluate(LAYOUT_JS)
