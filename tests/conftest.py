"""Suite-wide options and checks.

- ``STEPLOOP_NO_FAST_PATHS=1`` runs it with every fast path off (steploop/reducer/fastpaths.py).
- ``--slow`` runs the long explorations (marked ``slow``); CI runs without it.
- The interpreter must be tested on both anyio backends: if any interpreter test ran on one
  backend but none on the other (trio missing, a fixture narrowed), the session fails.
"""

from __future__ import annotations

import os

import pytest

from steploop.reducer import fastpaths

if os.environ.get("STEPLOOP_NO_FAST_PATHS") == "1":  # the suite with every fast path off
    fastpaths.disable()

_RAN: dict[str, int] = {"asyncio": 0, "trio": 0}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", default=False, help="run long explorations too")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="long exploration: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" or not report.passed or "tests/effects/" not in report.nodeid.replace("\\", "/"):
        return
    for backend in _RAN:
        if f"[{backend}" in report.nodeid or f"-{backend}]" in report.nodeid:
            _RAN[backend] += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    ran = {b: n for b, n in _RAN.items()}
    if any(ran.values()) and not all(ran.values()):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        msg = f"interpreter tests must run on asyncio and trio; passed per backend: {ran}"
        if reporter is not None:
            reporter.write_line(f"ERROR: {msg}", red=True)


# The Temporal SDK's native runtime can abort the interpreter while it shuts down (temporalio
# sdk-python issue 300; about a third of standalone scripts here). When the Temporal tests ran,
# the run ends with its own exit status, flushed, before the interpreter shuts down.
_SESSION: list[pytest.Session] = []


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _SESSION.append(session)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    import os
    import sys

    if "temporalio" in sys.modules and _SESSION and not hasattr(sys, "ps1"):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(_SESSION[0].exitstatus))
