"""``clusterkit nodes --html FILE``: one self-contained page, read back and screenshotted in
headless Chromium (installed by tests/run.sh; the screenshot test skips where it is missing)."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import zlib
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path

import pytest

from clusterkit.history.html import HARDWARE_COLOUR, OTHER_COLOUR

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _ago(days: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _history(tmp_path: Path) -> dict[str, str]:
    """node3: three Xid 79 verdicts of doctor, 20, 10 and 2 days ago; node2: a full disk a day ago;
    a detail that tries to break out of the page."""
    events = [{"node": "node3", "at": _ago(d), "source": "doctor", "what": "gpu-hardware", "hardware": True,
               "job": str(j), "detail": "Xid 79: GPU has fallen off the bus"} for d, j in ((20, 8812), (10, 8840),
                                                                                         (2, 8871))]
    events.append({"node": "node2", "at": _ago(1), "source": "preflight", "what": "storage.free", "hardware": False,
                   "job": "8900", "detail": "</title></circle></svg><script>alert(1)</script><img src=http://x/y>"})
    path = tmp_path / "state" / "nodes" / "testbed.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "events": events}))
    return {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _page(ck, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    env = _history(tmp_path)
    out = tmp_path / "nodes.html"
    res = ck.proc("nodes", "--site", "testbed", "--html", str(out), env=env)
    assert res.code == 0 and res.err.strip() == f"wrote {out}", res
    return out


def test_the_page_is_self_contained_and_escapes_what_the_history_says(ck, tmp_path: Path) -> None:
    page = _page(ck, tmp_path).read_text()
    parsed = _Tags()
    parsed.feed(page)
    tags = [t for t, _ in parsed.tags]
    assert "script" not in tags and "img" not in tags and "link" not in tags
    assert not [a for _, attrs in parsed.tags for k, a in attrs.items() if k in ("src", "href")]
    rows = [attrs["id"] for t, attrs in parsed.tags if t == "tr" and attrs.get("id")]
    assert rows == ["node-node3", "node-node2"]                      # the kept-out node first
    marks = [attrs["fill"] for t, attrs in parsed.tags if t == "circle"]
    assert marks == [HARDWARE_COLOUR] * 3 + [OTHER_COLOUR]
    text = "".join(parsed.text)
    assert "<script>alert(1)</script>" in text                       # shown as text, never markup
    assert "scontrol update NodeName=node3 State=DRAIN" in text and "gpu-hardware x3" in text


def test_bad_html_path_is_one_line(ck, tmp_path: Path) -> None:
    res = ck.proc("nodes", "--site", "testbed", "--html", str(tmp_path / "no" / "such" / "dir" / "x.html"),
                  env=_history(tmp_path))
    assert res.code == 2 and res.err.count("\n") == 1 and res.err.startswith("clusterkit: error: --html "), res


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, channels, rows


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (tests/run.sh installs it)")
def test_the_screenshot_shows_node3_s_three_failures(ck, tmp_path: Path) -> None:
    page = _page(ck, tmp_path)
    shot = tmp_path / "shot.png"
    subprocess.run([str(CHROMIUM), "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1600,700",
                    page.as_uri()], check=True, capture_output=True, timeout=120)
    width, channels, rows = _png_pixels(shot.read_bytes())
    red = tuple(int(HARDWARE_COLOUR[i:i + 2], 16) for i in (1, 3, 5))
    grey = tuple(int(OTHER_COLOUR[i:i + 2], 16) for i in (1, 3, 5))

    def columns(colour: tuple[int, ...]) -> tuple[list[int], set[int]]:
        """The marks drawn in ``colour``: rows holding 8 or more pixels of it side by side (a
        mark is a disc 14 pixels across; text anti-aliased in that colour never is), grouped by x."""
        xs, ys = set(), set()
        for y, row in enumerate(rows):
            run = 0
            for x in range(width):
                run = run + 1 if tuple(row[x * channels:x * channels + 3]) == colour else 0
                if run >= 8:
                    xs.update(range(x - run + 1, x + 1))
                    ys.add(y)
        runs, last = [], -10
        for x in sorted(xs):
            if x > last + 1:
                runs.append(x)
            last = x
        return runs, ys

    marks, red_rows = columns(red)
    others, grey_rows = columns(grey)
    assert len(marks) == 3, marks                       # node3's three hardware failures, apart in time
    assert len(others) == 1                             # node2's one other failure
    assert max(red_rows) < min(grey_rows)               # node3's row above node2's
