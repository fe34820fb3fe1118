"""The user's config file: a keymap over the binding ids and one of the two 16-colour themes, applied at
start; a bad file is one line naming the key, and the console starts with the defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinetic_tui.app import KineticApp
from kinetic_tui.config import THEMES, UserConfig, binding_ids, config_path, console_classes, load_config
from kinetic_tui.core.console import Console
from kinetic_tui.screens.help import HelpScreen
from kinetic_tui.views.jobs import JobsView
from tests.tui.conftest import SIZE, notes


def _config(tmp_path: Path, text: str) -> UserConfig:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config(binding_ids(), path)


def test_the_file_lives_under_xdg_config_home_or_the_home_config(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_path() == tmp_path / "xdg" / "kinetic-tui" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config_path() == tmp_path / ".config" / "kinetic-tui" / "config.toml"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert config_path() == tmp_path / ".config" / "kinetic-tui" / "config.toml"
    assert load_config(binding_ids()) == UserConfig()  # no file: the defaults, nothing to report


def test_every_binding_of_the_console_has_an_id():
    missing = [
        f"{cls.__module__}.{cls.__qualname__}: {binding.key}"
        for cls in console_classes()  # every view, screen and widget: the app module loaded them
        for binding in cls.__dict__.get("BINDINGS", ())
        if not getattr(binding, "id", None)
    ]
    assert missing == []
    ids = binding_ids()
    assert {"app.quit", "app.help", "jobs.cancel", "job.search", "log.wrap", "table.down"} <= set(ids)
    assert ids["jobs.cancel"] == "c" and ids["app.view_2"] == "2"


@pytest.mark.parametrize(
    "text, named",
    [
        ('theme = "solarized"\n', "theme 'solarized': expected one of ansi-dark, ansi-light"),
        ('colour = "red"\n', "unknown key 'colour'; valid: theme, keymap"),
        (
            '[keymap]\n"jobs.cancl" = "x"\n',
            "keymap.jobs.cancl: unknown binding id (did you mean 'jobs.cancel'?); valid: app.command_bar, app.filter",
        ),
        ('[keymap]\n"jobs.cancel" = 5\n', "keymap.jobs.cancel: expected a key such as"),
        ('[keymap]\n"jobs.cancel" = "ctrl x"\n', "keymap.jobs.cancel: expected a key such as"),
        ("keymap = 3\n", "keymap: expected a table"),
        ("theme = \n", "not TOML"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key_and_gives_the_defaults(tmp_path, text, named):
    config = _config(tmp_path, 'theme = "ansi-light"\n' + text if "theme" not in text else text)
    assert config.keymap == {} and config.theme == THEMES[0]
    assert config.problem is not None and "\n" not in config.problem
    assert config.problem.startswith(f"{tmp_path / 'config.toml'}: ") and named in config.problem
    assert config.problem.endswith("; using defaults")


async def test_the_keymap_and_the_theme_apply_at_start(tmp_path, console: Console):
    config = _config(tmp_path, 'theme = "ansi-light"\n[keymap]\n"app.help" = "f1"\n"jobs.cancel" = "x"\n')
    assert config.problem is None
    app = KineticApp(console, config=config)
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == "ansi-light"
        await pilot.press("question_mark")  # no longer the help key
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("2")
        assert isinstance(app.current_view, JobsView)
        keys = {binding.action: key for key, (_, binding, _, _) in app.screen.active_bindings.items()}
        assert keys["cancel"] == "x"
        assert notes(app, "error") == []


async def test_a_bad_file_is_reported_once_and_the_console_runs_with_the_defaults(tmp_path, console: Console):
    config = _config(tmp_path, '[keymap]\n"app.hlep" = "f1"\n')
    app = KineticApp(console, config=config)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        (note,) = notes(app, "error")
        assert "keymap.app.hlep: unknown binding id (did you mean 'app.help'?); valid: app.command_bar, " in note
        assert app.theme == THEMES[0]
        await pilot.press("question_mark")  # the default key still works
        assert isinstance(app.screen, HelpScreen)
