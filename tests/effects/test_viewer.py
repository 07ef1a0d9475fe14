"""``steploop show --html``: one self-contained page, checked in a real headless Chromium.

The browser tests need Debian's ``chromium`` (CI installs it, .ci/run); where it is absent they
skip and say so. They check that the page loads without a console error (and that an error
would be seen: a broken page is caught), that its script drew one bar per round (the DOM), and
that a screenshot shows that many bars (pixel runs of the round colours).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from steploop.effects.cli import main
from steploop.effects.viewer import ROUND_COLOURS

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium here (apt-get install chromium; CI installs it)"
)
ROUNDS = 5  # four tool rounds, then the answer


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _page(tmp_path_factory.mktemp("viewer"))


def _page(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("hello\n")
    read = {"type": "tool_call", "name": "Read", "input": {"file_path": "a.txt"}}
    script = tmp_path / "s.json"
    script.write_text(json.dumps([read] * (ROUNDS - 1) + [{"type": "reply", "text": "done"}]))
    trace, page = tmp_path / "t.jsonl", tmp_path / "t.html"
    argv = ["run", "go", "--workspace", str(tmp_path), "--scripted", str(script), "--trace", str(trace)]
    assert main(argv, out=io.StringIO()) == 0
    out = io.StringIO()
    assert main(["show", str(trace), "--html", str(page)], out=out) == 0, out.getvalue()
    return page


def test_the_page_is_one_self_contained_file(page: Path) -> None:
    """Nothing is fetched: no src/href, no url() but in-page references, a CSP forbidding
    every fetch; the trace data is embedded."""
    text = page.read_text()
    assert not re.search(r"\b(src|href)\s*=", text)
    assert re.findall(r"url\(([^)]*)\)", text) and all(u.startswith("#") for u in re.findall(r"url\(([^)]*)\)", text))
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) == {"http://www.w3.org/2000/svg"}  # a namespace, never fetched
    assert "default-src 'none'" in text and '"rounds": [' in text


def _chromium(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
        "--enable-logging=stderr", "--v=0", "--force-device-scale-factor=1", "--hide-scrollbars",
        *extra, url,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


@needs_chromium
def test_page_loads_without_console_errors_and_draws_every_round(tmp_path: Path, page: Path) -> None:
    done = _chromium(tmp_path, page.as_uri(), "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    console = _console(done.stderr)
    assert any(f"steploop viewer: drew {ROUNDS} rounds" in c for c in console), done.stderr[-2000:]
    assert all("drew" in c for c in console), console  # the page's one log line, nothing else
    dom = done.stdout
    assert f'data-rounds="{ROUNDS}"' in dom
    assert len(re.findall(r'<rect class="round ', dom)) == ROUNDS
    assert len(re.findall(r'<rect class="round continue', dom)) == ROUNDS - 1


@needs_chromium
def test_a_broken_page_is_seen(tmp_path: Path) -> None:
    """The console check has teeth: a script error on a page shows up in what it reads."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>noSuchFunction();</script></body></html>")
    done = _chromium(tmp_path, bad.as_uri(), "--dump-dom")
    assert any("Uncaught ReferenceError" in c for c in _console(done.stderr)), done.stderr[-2000:]


def _png_rows(data: bytes) -> tuple[int, int, list[bytes], int]:
    """Decode an 8-bit, non-interlaced RGB or RGBA PNG: (width, height, rows, bytes/pixel)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = bpp = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour in (2, 6)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
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
    return width, height, rows, bpp


@needs_chromium
def test_screenshot_shows_one_bar_per_round(tmp_path: Path, page: Path) -> None:
    shot = tmp_path / "shot.png"
    done = _chromium(tmp_path, page.as_uri(), f"--screenshot={shot}", "--window-size=760,520")
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    width, _, rows, bpp = _png_rows(shot.read_bytes())
    colours = {bytes(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in ROUND_COLOURS.values()}
    best = 0
    for row in rows:  # the row that crosses the most bars (18 px wide runs of a round colour)
        runs = run = 0
        for x in range(width):
            if row[x * bpp : x * bpp + 3] in colours:
                run += 1
            else:
                runs += 17 <= run <= 19
                run = 0
        best = max(best, runs)
    assert best == ROUNDS
    distinct = {rows[y][x * bpp : x * bpp + 3] for y in range(0, len(rows), 7) for x in range(0, width, 7)}
    assert len(distinct) > 10  # not blank
