"""The TUI's read-only filter, view actions and palette commands come from the verb table."""

from __future__ import annotations

from kinetic_tui.app import VIEW_CLASSES
from kinetic_tui.core.commands.verbs import READ_ONLY_VERBS, VERBS
from kinetic_tui.palette import verb_entries
from kinetic_tui.views.base import View

# what `--readonly` hid before the table said which verbs mutate; it must still hide exactly these
HIDDEN = {
    "Clusters": {"add_pool", "remove_pool"},
    "Jobs": {"submit", "cancel"},
    "Training": {"train", "interrupt", "resume"},
    "Registry": {"promote"},
    "Endpoints": {"scale", "load"},
    "Pipelines": {"rerun", "cancel"},
}


def test_the_read_only_verbs_are_those_that_change_nothing() -> None:
    assert {
        "pools",
        "jobs",
        "functions",
        "status",
        "logs",
        "wait",
        "result",
        "models",
        "pipelines",
        "endpoints",
        "show",
        "help",
        "endpoint logs",
    } == READ_ONLY_VERBS


def test_each_view_hides_the_actions_whose_verb_mutates() -> None:
    assert {cls.title: set(cls.mutating_actions()) for cls in VIEW_CLASSES} == HIDDEN
    for cls in VIEW_CLASSES:
        actions = {binding.action for binding in cls.BINDINGS}  # type: ignore[union-attr]
        assert set(cls.ACTION_VERBS) <= actions, cls.title


def test_an_action_naming_an_unknown_verb_is_refused_when_the_view_is_defined() -> None:
    try:
        type("Broken", (View,), {"ACTION_VERBS": {"go": "launch"}})
    except TypeError as exc:
        assert "launch" in str(exc)
    else:
        raise AssertionError("a view mapped an action to a verb the table lacks")


class _Host:
    def __init__(self, readonly: bool) -> None:
        self.readonly = readonly

    async def action_command_bar(self, text: str = "") -> None:
        self.typed = text


def test_the_palette_offers_every_verb_and_a_read_only_console_only_harmless_ones() -> None:
    assert [entry.text for entry in verb_entries(_Host(False))] == [f"Command: {name}" for name in VERBS]
    assert {entry.text.split(": ", 1)[1] for entry in verb_entries(_Host(True))} == READ_ONLY_VERBS


async def test_a_palette_verb_opens_the_command_bar_with_the_verb_typed() -> None:
    host = _Host(False)
    entry = next(entry for entry in verb_entries(host) if entry.text == "Command: train")
    await entry.run()
    assert host.typed == "train " and "start a managed training job" in entry.help


async def test_choosing_a_verb_in_the_palette_types_it_in_the_command_bar(make_app) -> None:
    from kinetic_tui.widgets.command_bar import CommandBar
    from tests.tui.conftest import SIZE, palette_enter, wait_for

    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p", *"Command: tune")
        await palette_enter(app, pilot, "Command: tune")
        await wait_for(lambda: bool(app.query(CommandBar)) and app.query_one(CommandBar).display, pilot)
        assert app.query_one(CommandBar).prompt.value == "tune "
