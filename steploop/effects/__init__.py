"""steploop's imperative shell: the anyio interpreter and the handlers it runs effects with."""

import os

from steploop.reducer import fastpaths

if os.environ.get("STEPLOOP_NO_FAST_PATHS") == "1":  # every fast path off (the differential run)
    fastpaths.disable()

from steploop.effects.run import (
    PermissionPolicy,
    PermissionRequest,
    Run,
    RunResult,
    run,
    run_sync,
)

__all__ = ["PermissionPolicy", "PermissionRequest", "Run", "RunResult", "run", "run_sync"]
