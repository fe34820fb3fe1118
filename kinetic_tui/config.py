"""The user's console settings: `$XDG_CONFIG_HOME/kinetic-tui/config.toml` (default
`~/.config/kinetic-tui/config.toml`), read once when the console starts.

```toml
theme = "ansi-light"            # one of THEMES, the 16-colour themes
[keymap]                        # binding id -> key(s), comma-separated as Textual spells them
"jobs.cancel" = "x"
"app.quit" = "ctrl+q,q"
```

Every binding of the console has an id (`binding_ids` lists them). The file is all or nothing: anything wrong
in it (not TOML, an unknown key, a theme that is not one of THEMES, an unknown binding id, a key that is
not a key name) is one line naming that key, and the console starts with the defaults, so a typo never
leaves a half-applied keymap.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from textual.binding import Binding
from textual.dom import DOMNode

THEMES = ("ansi-dark", "ansi-light")
DEFAULT_THEME = THEMES[0]
_KEYS = ("theme", "keymap")
_KEY = re.compile(r"[^\s,]+")  # one key as Textual names it: `x`, `ctrl+q`, `f5`, `question_mark`


@dataclass(frozen=True)
class UserConfig:
    keymap: Mapping[str, str] = field(default_factory=dict)
    theme: str = DEFAULT_THEME
    problem: str | None = None  # why the file was not used: one line naming the key


def config_path() -> Path:
    """Where the file is looked for: under XDG_CONFIG_HOME when it is set (and absolute), else ~/.config."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "kinetic-tui" / "config.toml"


def binding_ids(classes: Iterable[type[DOMNode]] | None = None) -> dict[str, str]:
    """Every binding id of the console's widgets and screens (default: every one defined in kinetic_tui
    that is loaded) -> its default key, sorted by id."""
    found: dict[str, str] = {}
    for cls in console_classes() if classes is None else classes:
        for binding in cls.__dict__.get("BINDINGS", ()):
            if isinstance(binding, Binding) and binding.id:
                found.setdefault(binding.id, binding.key)
    return dict(sorted(found.items()))


def console_classes() -> list[type[DOMNode]]:
    pending, seen = [DOMNode], []
    while pending:
        for sub in pending.pop().__subclasses__():
            pending.append(sub)
            if sub.__module__.startswith("kinetic_tui."):
                seen.append(sub)
    return seen


def load_config(valid_ids: Iterable[str], path: Path | None = None) -> UserConfig:
    """The settings of the file (a missing file: the defaults), judged against the binding ids the console
    has; a file with a problem gives the defaults and the problem."""
    source = path or config_path()
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        return UserConfig()
    except (OSError, UnicodeDecodeError) as exc:
        return UserConfig(problem=f"{source}: cannot read it ({getattr(exc, 'strerror', None) or exc}); using defaults")
    try:
        return _judged(tomllib.loads(text), set(valid_ids))
    except _Problem as exc:
        return UserConfig(problem=f"{source}: {exc}; using defaults")
    except tomllib.TOMLDecodeError as exc:
        return UserConfig(problem=f"{source}: not TOML ({exc}); using defaults")


class _Problem(ValueError):
    pass


def _judged(data: Mapping[str, Any], valid_ids: set[str]) -> UserConfig:
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise _Problem(f"unknown key {unknown[0]!r}; valid: {', '.join(_KEYS)}")
    theme = data.get("theme", DEFAULT_THEME)
    if theme not in THEMES:
        raise _Problem(f"theme {theme!r}: expected one of {', '.join(THEMES)}")
    keymap = data.get("keymap", {})
    if not isinstance(keymap, dict):
        raise _Problem('keymap: expected a table of binding id = "key"')
    for binding_id, keys in keymap.items():
        if binding_id not in valid_ids:
            close = get_close_matches(binding_id, sorted(valid_ids), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _Problem(f"keymap.{binding_id}: unknown binding id{hint}; valid: {', '.join(sorted(valid_ids))}")
        if not isinstance(keys, str) or not all(_KEY.fullmatch(key.strip()) for key in keys.split(",")):
            raise _Problem(f'keymap.{binding_id}: expected a key such as "x" or "ctrl+q", got {keys!r}')
    return UserConfig({key: value.replace(" ", "") for key, value in keymap.items()}, theme)
