"""Stop hooks from Claude Code settings files (steploop/effects/settings.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from steploop.effects.settings import (
    COMMAND_HOOK_TIMEOUT_S,
    SettingsError,
    load_settings,
    project_settings_files,
)


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_matcher_groups_timeouts_dedup_and_other_events(tmp_path: Path) -> None:
    """Stop ignores its matcher, SubagentStop matches the agent type as a regex, timeouts are
    seconds (600 by default), identical handlers run once, other events are checked but not run,
    prompt and agent hooks are skipped with a reason."""
    a = _write(tmp_path / "a.json", {
        "hooks": {
            "Stop": [
                {"matcher": "ignored", "hooks": [{"type": "command", "command": "one", "timeout": 5}]},
                {"hooks": [{"type": "command", "command": "two"}, {"type": "prompt", "prompt": "ok?"}]},
            ],
            "SubagentStop": [{"matcher": "Expl.*", "hooks": [{"type": "command", "command": "sub"}]}],
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "pre"}]}],
        }
    })
    b = _write(tmp_path / "b.json", {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "two"}]}]}})
    s = load_settings([a, b])
    stop = s.for_event("Stop")
    assert [(h.command, h.timeout_s) for h in stop] == [("one", 5.0), ("two", COMMAND_HOOK_TIMEOUT_S)]
    assert [h.command for h in s.for_event("SubagentStop", "Explore")] == ["sub"]
    assert s.for_event("SubagentStop", "Plan") == ()
    assert len(s.skipped) == 1 and "'prompt' hook" in s.skipped[0] and "hooks.Stop[1].hooks[1]" in s.skipped[0]
    assert s.files == (str(a), str(b))


def test_disable_all_hooks(tmp_path: Path) -> None:
    p = _write(tmp_path / "s.json", {"disableAllHooks": True, "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}})
    assert load_settings([p]).for_event("Stop") == ()


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ([], "expected a JSON object"),
        ({"hooks": {"Stop": {}}}, "hooks.Stop: expected a list"),
        ({"hooks": {"Stop": [{"hooks": {}}]}}, "hooks.Stop[0].hooks: expected a list"),
        ({"hooks": {"Stop": [{"matcher": 1, "hooks": []}]}}, "hooks.Stop[0].matcher"),
        ({"hooks": {"SubagentStop": [{"matcher": "(", "hooks": []}]}}, "not a regular expression"),
        ({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": True}]}]}}, "timeout"),
        ({"disableAllHooks": "yes"}, "disableAllHooks"),
    ],
)
def test_malformed_settings_name_file_and_place(tmp_path: Path, data: object, where: str) -> None:
    p = _write(tmp_path / "s.json", data)
    with pytest.raises(SettingsError) as e:
        load_settings([p])
    assert str(e.value).startswith(str(p)) and where in str(e.value) and "\n" not in str(e.value)


def test_project_settings_files(tmp_path: Path) -> None:
    assert project_settings_files(tmp_path) == []
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.local.json").write_text("{}")
    assert project_settings_files(tmp_path) == [tmp_path / ".claude" / "settings.local.json"]
