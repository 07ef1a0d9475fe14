"""steploop's imperative shell: the anyio interpreter and the handlers it runs effects with."""

from steploop.effects.run import (
    PermissionPolicy,
    PermissionRequest,
    Run,
    RunResult,
    run,
    run_sync,
)

__all__ = ["PermissionPolicy", "PermissionRequest", "Run", "RunResult", "run", "run_sync"]
