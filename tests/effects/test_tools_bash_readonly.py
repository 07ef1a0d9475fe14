"""Which Bash commands are read-only, so scheduled concurrently (specs/ E-BASH-RO-1): Claude
Code's rule (2.1.88, tools/BashTool/readOnlyValidation.ts with bashSecurity.ts), case by case.
The same rule serves the Bash tool's ``is_concurrency_safe`` and the importer (IMP-12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from steploop.effects.importer.infer import traits_for
from steploop.effects.tools import ToolRegistry, builtin_tools, is_read_only_command

# (command, read-only, why: the part of Claude Code's rule that decides)
CASES: list[tuple[str, bool, str]] = [
    # the harmless redirections are stripped (bashSecurity.stripSafeRedirections)
    ("find . -name '*.py' 2>/dev/null", True, "2>/dev/null stripped (issue 21: was queued)"),
    ('find src -name "*.css" 2>/dev/null | head -5', True, "quoted glob; pipe of read-only"),
    ("grep -rn TODO src > /dev/null", True, "[012]?>/dev/null stripped, fd optional"),
    ("ls -la 2>&1 | head", True, " 2>&1 stripped"),
    ("git log --oneline -5 2>/dev/null || echo none", True, "|| of read-only parts"),
    ("wc -l </dev/null", True, "</dev/null stripped"),
    ("ls 2>/dev/null|head", False, "stripped only before a space or the end, as Claude Code"),
    ('ls 2>"/dev/null" ', False, "a quoted target is not stripped"),
    ("sed 's/a/b/ 2>&1 ' f.txt", False, "quoted text is never a redirection"),
    ("echo hi >&2", False, ">&2 is not among the stripped forms"),
    ("ls &>/dev/null", False, "&> leaves a background &"),
    # anything else redirected, expanded or grouped
    ("cat a.txt > b.txt", False, "output redirection"),
    ("echo hi >> log.txt", False, "appending redirection"),
    ("sort < in.txt", False, "input redirection"),
    ("cat <<EOF", False, "here-document"),
    ("echo $HOME", False, "variable expansion (containsUnquotedExpansion)"),
    ('echo "$HOME"', False, "expands inside double quotes too"),
    ("echo '$HOME'", True, "literal inside single quotes"),
    ('echo "$(whoami)"', False, "command substitution"),
    ("echo `id`", False, "backtick substitution"),
    ("diff <(ls a) <(ls b)", False, "process substitution"),
    ("ls *.py", False, "unquoted glob"),
    ("ls 'a b' \"c;d\" e\\|f", True, "quoted and escaped metacharacters are words"),
    ("sleep 10 &", False, "background job"),
    ("(cd src && ls)", False, "subshell"),
    ("{ ls; }", False, "group"),
    ("ls\nrm -rf x", False, "line break"),
    ("ls # comment", False, "comment"),
    ("ls; pwd", True, "; of read-only parts"),
    ("", False, "empty"),
    ("echo 'open", False, "unbalanced quote"),
    # the program and its options
    ("cat README.md | grep -n foo | wc -l", True, "READONLY_COMMANDS and grep"),
    ("git status && git diff --stat", True, "git read-only subcommands"),
    ("git branch", True, "git branch lists"),
    ("git branch feature", False, "git branch NAME creates"),
    ("git commit -m x", False, "git commit writes"),
    ("git diff --output=patch.txt", False, "git diff --output writes"),
    ("git -c core.pager=x log", False, "git -c runs configured programs"),
    ("cd src && git status", False, "cd and git in one command"),
    ("cd src && ls", True, "cd alone"),
    ("find . -name x -delete", False, "find -delete"),
    ("find . -name x -execdir ls", False, "find -execdir"),
    ("find . -type f -newer a.txt", True, "find without writing options"),
    ("sort -o out.txt in.txt", False, "sort -o writes"),
    ("sort -n in.txt", True, "sort to stdout"),
    ("tree -o out.txt", False, "tree -o writes"),
    ("tree src -I 'node_modules|.git' -L 3", True, "tree display options"),
    ("sed -n '1,20p' f.txt", True, "sed printing"),
    ("sed 's|a|b|g' f.txt", True, "sed substitution to stdout"),
    ("sed -i 's/a/b/' f.txt", False, "sed -i edits in place"),
    ("sed 's/a/b/w out' f.txt", False, "sed w writes"),
    ("date +%Y-%m-%d", True, "date format"),
    ("date -s 2020-01-01", False, "date -s sets the clock"),
    ("date 010101012020", False, "date MMDDhhmm sets the clock"),
    ("uniq -c in.txt", False, "uniq with a file may write its second"),
    ("uniq -c", True, "uniq filtering stdin"),
    ("find . -name '*.ts' | xargs grep -l foo", True, "xargs running grep"),
    ("ls | xargs rm", False, "xargs running rm"),
    ("jq '.name' package.json", True, "jq filter"),
    ("jq -n 'env.HOME'", False, "jq env"),
    ("rg --pre cat foo", False, "rg --pre runs a program"),
    ("pwd", True, "pwd"),
    ("whoami", True, "whoami"),
    ("python --version", True, "exact version check"),
    ("python script.py", False, "not on the table"),
    ("npm test", False, "not on the table"),
    ("rm -rf build", False, "not on the table"),
    ("FOO=1 ls", False, "an assignment first"),
    ("/bin/ls", False, "a path, not a program name"),
    ("awk '{print $1}' f.txt", False, "awk is not read-only for Claude Code (system())"),
]


@pytest.mark.spec("E-BASH-RO-1")
@pytest.mark.parametrize(("command", "read_only", "why"), CASES)
def test_claude_codes_read_only_rule(command: str, read_only: bool, why: str) -> None:
    """Each case is read-only (scheduled concurrently) exactly as Claude Code decides."""
    assert is_read_only_command(command) is read_only, why


@pytest.mark.spec("E-BASH-RO-1")
def test_the_rule_schedules_bash_and_imported_calls(tmp_path: Path) -> None:
    """The Bash tool and the importer (IMP-12) use the rule: ``find … 2>/dev/null`` is
    concurrency-safe in both, a redirection into a file in neither."""
    registry = ToolRegistry(builtin_tools(tmp_path, enable_bash=True))
    for command, safe in [("find . -name '*.py' 2>/dev/null", True), ("ls > out", False)]:
        assert registry.traits("Bash", {"command": command}).concurrency_safe is safe
        assert traits_for("Bash", {"command": command}).concurrency_safe is safe
