"""The verb table: every verb of the command language, declared once.

Each entry holds the verb's positionals and flags (types, help, the kind of object a name argument
names), whether it mutates, whether it starts work (`--wait`/`--detach`) and the Console call it makes.
Everything else is generated from it: the parser, the executor's dispatch, `help`, completion (the
console's bar and the shell's), the read-only console's filter, the palette's commands and the click CLI.
The calls are plain calls on the Console, one per verb, so they read like the verbs they implement.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from difflib import get_close_matches
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.commands.grammar import (
    ACCELERATOR,
    BY_KIND,
    FUNCTION,
    HP,
    JOB_ID,
    JOB_STATUSES,
    NAME,
    PARAM,
    REFERENCE,
    SECONDS,
    SHOW_KINDS,
    SPACE,
    STAGE,
    Flag,
    Positional,
    ValueType,
    Verb,
    choice,
    echo,
    integer,
    json_of,
)
from kinetic_tui.core.commands.help import overview, verb_help
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.platform.tuning import STRATEGIES
from kinetic_tui.core.validation import (
    MAX_CONCURRENCY,
    MAX_EPOCHS,
    MAX_INSTANCES,
    MAX_LISTED,
    MAX_LOAD_CONCURRENCY,
    MAX_LOAD_TICKS,
    MAX_LOADED_MODELS,
    MAX_NODES,
    MAX_SEED,
    MAX_TAIL_LINES,
    MAX_TICK,
    MAX_TRIALS,
    MAX_VERSION,
)

if TYPE_CHECKING:
    from kinetic_tui.core.console import Console


def _verb_topic(text: str) -> str:
    if text not in VERBS and text not in FAMILIES:
        raise ValidationError(unknown_verb_message(text))
    return text


TOPIC = ValueType("VERB", "a verb", _verb_topic)


def _pos(
    name: str, metavar: str, text: str, kind: ValueType = NAME, required: bool = True, names: str = ""
) -> Positional:
    return Positional(name, kind, text, metavar, required, names=names)


def _flag(name: str, kind: ValueType | None, text: str, default: Any = None, **extra: Any) -> Flag:
    """Switches default to False; valued flags to `default` (None: not given)."""
    return Flag(name, kind, text, False if kind is None and default is None else default, **extra)


def _pipeline_run() -> Flag:
    return _flag("--run", integer(1, MAX_VERSION), "the run's number (default: the latest)")


def _pipeline_params() -> Flag:
    return _flag("--param", PARAM, "override a pipeline parameter", {}, repeatable=True)


def _step() -> Flag:
    return _flag(
        "--step",
        REFERENCE,
        "training step MODULE:FUNC(hyperparameters, epoch, state) -> state (default: the built-in step)",
    )


async def _help(topic: str | None) -> str:
    return help_text(topic)


async def _show(console: Console, kind: str, name: str) -> Any:
    if kind == "model":
        group, sep, version = name.partition(":v")
        if not sep:
            return await console.registry.models(name)
        if not version.isdigit():
            raise ValidationError(f"model {name!r}: expected GROUP or GROUP:vN")
        return await console.registry.version(group, int(version))
    readers: dict[str, Callable[[str], Awaitable[Any]]] = {
        "job": console.jobs.get,
        "training": console.training.get,
        "study": console.training.study,
        "endpoint": console.endpoints.get,
        "pipeline": console.pipelines.get,
        "pool": console.pools.get,
    }
    return await readers[kind](name)


_JOB = _pos("job", "JOB", "job id", JOB_ID, names="job")
_ENDPOINT = _pos("endpoint", "ENDPOINT", "endpoint name", names="endpoint")
_TRAINING = _pos("training", "TRAINING", "training job name", names="training")
_GROUP = _pos("group", "GROUP", "model group", names="group")

_TABLE = (
    Verb(
        "pools",
        "list accelerator pools with nodes in use and queued jobs",
        mutates=False,
        run=lambda c, a, w: c.pools.list(),
    ),
    Verb(
        "pool add",
        "add a pool of N nodes with one accelerator (emulated on the local backend)",
        (_pos("name", "NAME", "pool name"),),
        (
            _flag("--accelerator", ACCELERATOR, "accelerator of every node", required=True),
            _flag("--nodes", integer(1, MAX_NODES), "number of nodes", required=True),
            _flag("--spot", None, "spot (preemptible) nodes"),
        ),
        run=lambda c, a, w: c.pools.add(a["name"], a["accelerator"], a["nodes"], a["spot"]),
    ),
    Verb(
        "pool remove",
        "remove a pool",
        (_pos("name", "NAME", "pool name", names="pool"),),
        run=lambda c, a, w: c.pools.remove(a["name"]),
    ),
    Verb(
        "jobs",
        "list jobs, newest first",
        flags=(
            _flag("--status", choice("S", JOB_STATUSES), "only jobs in this status"),
            _flag("--limit", integer(1, MAX_LISTED), "only the newest N"),
        ),
        mutates=False,
        run=lambda c, a, w: c.jobs.list(a["status"], a["limit"]),
    ),
    Verb(
        "submit",
        "run MODULE:FUNC (or a saved submission's NAME) as a job on a pool",
        (_pos("ref", "MODULE:FUNC", "function to run, or a saved NAME", FUNCTION, names="function"),),
        (
            _flag("--accelerator", ACCELERATOR, "accelerator (default: the saved one, the function's own, else cpu)"),
            _flag("--args", json_of(list), "positional arguments (default: the saved ones)", []),
            _flag("--kwargs", json_of(dict), "keyword arguments (default: the saved ones)", {}),
            _flag("--name", NAME, "display name"),
            _flag("--save", NAME, "save this submission as NAME: `submit NAME` runs it again"),
        ),
        starts_work=True,
        run=lambda c, a, w: c.jobs.submit(
            a["ref"], a["accelerator"], a["args"], a["kwargs"], a["name"], w, save=a["save"]
        ),
    ),
    Verb(
        "functions",
        "list what submit can run: saved submissions, then every MODULE:FUNC submitted here",
        mutates=False,
        run=lambda c, a, w: c.jobs.known_functions(),
    ),
    Verb("status", "show a job's status", (_JOB,), mutates=False, run=lambda c, a, w: c.jobs.get(a["job"])),
    Verb(
        "logs",
        "print a job's log",
        (_JOB,),
        (
            _flag("--tail", integer(0, MAX_TAIL_LINES), "only the last N lines", short="-n"),
            _flag("--follow", None, "keep printing new lines until the job ends", short="-f"),
        ),
        mutates=False,
        run=lambda c, a, w: c.jobs.logs(a["job"], a["tail"], a["follow"]),
    ),
    Verb(
        "wait",
        "wait until a job ends",
        (_JOB,),
        (_flag("--timeout", SECONDS, "give up after this long (the job keeps running)"),),
        mutates=False,
        run=lambda c, a, w: c.jobs.wait(a["job"], a["timeout"]),
    ),
    Verb(
        "result",
        "show a job's result or remote traceback",
        (_JOB,),
        (_flag("--timeout", SECONDS, "first wait this long for the job to end (default: answer at once)"),),
        mutates=False,
        run=lambda c, a, w: c.jobs.result(a["job"], a["timeout"]),
    ),
    Verb("cancel", "cancel a job", (_JOB,), run=lambda c, a, w: c.jobs.cancel(a["job"])),
    Verb(
        "train",
        "start a managed training job",
        (_pos("name", "NAME", "training job name"),),
        (
            _flag("--hp", HP, "hyperparameter", {}, repeatable=True),
            _flag("--epochs", integer(1, MAX_EPOCHS), "epochs to train", 5),
            _flag("--checkpoint-every", integer(1, MAX_EPOCHS, "K"), "checkpoint every K epochs", 1),
            _flag("--pool", NAME, "pool to run on (default: any pool that fits)", names="pool"),
            _flag(
                "--interrupt-before-epoch", integer(1, MAX_EPOCHS, "E"), "stop before epoch E, as a preemption would"
            ),
            _step(),
        ),
        starts_work=True,
        run=lambda c, a, w: c.training.start(
            a["name"],
            a["hp"],
            a["epochs"],
            a["checkpoint_every"],
            a["pool"],
            a["interrupt_before_epoch"],
            w,
            step=a["step"],
        ),
    ),
    Verb(
        "interrupt",
        "stop a running training job (a spot preemption)",
        (_TRAINING,),
        run=lambda c, a, w: c.training.interrupt(a["training"]),
    ),
    Verb(
        "resume",
        "continue a stopped training job from its checkpoint",
        (_TRAINING,),
        starts_work=True,
        run=lambda c, a, w: c.training.resume(a["training"], wait=w),
    ),
    Verb(
        "tune",
        "run a hyperparameter study",
        (_pos("name", "NAME", "study name"),),
        (
            _flag("--space", SPACE, "values to search for one hyperparameter", {}, repeatable=True, required=True),
            _flag("--strategy", choice("S", STRATEGIES), "search strategy", required=True),
            _flag("--max-trials", integer(1, MAX_TRIALS), "trial budget", required=True),
            _flag("--seed", integer(0, MAX_SEED), "seed of the random strategy", 0),
            _flag("--pool", NAME, "pool the trials run on (default: any pool that fits)", names="pool"),
            _step(),
        ),
        starts_work=True,
        run=lambda c, a, w: c.training.tune(
            a["name"], a["space"], a["strategy"], a["max_trials"], a["seed"], pool=a["pool"], wait=w, step=a["step"]
        ),
    ),
    Verb(
        "register",
        "register a training job's artifact as a new model version",
        (_pos("group", "GROUP", "model group", names="group"),),
        (
            _flag("--from-training", NAME, "completed training job", required=True, names="training"),
            _flag(
                "--predict",
                REFERENCE,
                "serving entry point MODULE:FUNC(state, record) -> JSON (default: the built-in step's predict)",
            ),
        ),
        run=lambda c, a, w: c.registry.register_from_training(a["group"], a["from_training"], a["predict"]),
    ),
    Verb(
        "promote",
        "move a model version to another stage",
        (
            _GROUP,
            _pos("version", "VERSION", "version number", integer(1, MAX_VERSION)),
            _pos("stage", "STAGE", "target stage", STAGE),
        ),
        (_flag("--no-archive-existing", None, "refuse instead of archiving the current Production"),),
        run=lambda c, a, w: c.registry.promote(a["group"], a["version"], a["stage"], not a["no_archive_existing"]),
    ),
    Verb(
        "models",
        "list model groups, or one group's versions",
        (_pos("group", "GROUP", "model group", required=False, names="group"),),
        mutates=False,
        run=lambda c, a, w: c.registry.models(a["group"]),
    ),
    Verb(
        "endpoint create",
        "create a serving endpoint for a model group",
        (_pos("name", "NAME", "endpoint name"),),
        (
            _flag("--model", NAME, "model group to serve", required=True, names="group"),
            _flag("--min", integer(1, MAX_INSTANCES), "minimum instances", 1),
            _flag("--max", integer(1, MAX_INSTANCES), "maximum instances", 5),
            _flag("--target", integer(1, MAX_CONCURRENCY), "target concurrency per instance", 10),
            _flag("--scale-out-cooldown", integer(0, MAX_TICK, "T"), "ticks between scale-outs", 3),
            _flag("--scale-in-cooldown", integer(0, MAX_TICK, "T"), "ticks between scale-ins", 5),
            _flag("--max-loaded-models", integer(1, MAX_LOADED_MODELS), "models kept loaded (LRU)", 3),
            _flag("--pool", NAME, "pool the instances take nodes from (default: the cpu pool)", names="pool"),
            _flag("--accelerator", ACCELERATOR, "instances on the pool of this accelerator"),
            _flag("--port", integer(0, 65535), "router port on 127.0.0.1 (0: a free one, kept)", 0),
            _flag("--tick-seconds", SECONDS, "controller tick (0: ticks only from observe)", 1.0),
        ),
        run=lambda c, a, w: c.endpoints.create(
            a["name"],
            a["model"],
            a["min"],
            a["max"],
            a["target"],
            a["scale_out_cooldown"],
            a["scale_in_cooldown"],
            a["max_loaded_models"],
            a["port"],
            a["tick_seconds"],
            a["pool"],
            a["accelerator"],
        ),
    ),
    Verb(
        "endpoint stop",
        "drain and stop an endpoint's instances and router",
        (_ENDPOINT,),
        run=lambda c, a, w: c.endpoints.stop(a["endpoint"]),
    ),
    Verb(
        "endpoint start",
        "bring a stopped endpoint back from the store",
        (_ENDPOINT,),
        run=lambda c, a, w: c.endpoints.start(a["endpoint"]),
    ),
    Verb(
        "endpoint logs",
        "print an endpoint's router and instance logs",
        (_ENDPOINT,),
        (_flag("--tail", integer(0, MAX_TAIL_LINES), "the last N lines of each log", 50, short="-n"),),
        mutates=False,
        run=lambda c, a, w: c.endpoints.logs(a["endpoint"], a["tail"]),
    ),
    Verb(
        "scale",
        "change an endpoint's scaling bounds",
        (_ENDPOINT,),
        (
            _flag("--min", integer(1, MAX_INSTANCES), "minimum instances"),
            _flag("--max", integer(1, MAX_INSTANCES), "maximum instances"),
            _flag("--target", integer(1, MAX_CONCURRENCY), "target concurrency per instance"),
        ),
        run=lambda c, a, w: c.endpoints.scale(a["endpoint"], a["min"], a["max"], a["target"]),
    ),
    Verb(
        "observe",
        "feed one concurrency observation to the autoscaler",
        (_ENDPOINT, _pos("concurrency", "CONCURRENCY", "requests in flight", integer(0, MAX_CONCURRENCY))),
        (_flag("--tick", integer(0, MAX_TICK, "T"), "tick of the observation (default: the endpoint's clock)"),),
        run=lambda c, a, w: c.endpoints.observe(a["endpoint"], a["concurrency"], a["tick"]),
    ),
    Verb(
        "load",
        "drive an endpoint with a load pattern",
        (_ENDPOINT,),
        (
            _flag("--concurrency", integer(0, MAX_LOAD_CONCURRENCY), "requests in flight per tick", required=True),
            _flag("--ticks", integer(1, MAX_LOAD_TICKS, "T"), "number of ticks", required=True),
        ),
        starts_work=True,
        run=lambda c, a, w: c.endpoints.load(a["endpoint"], a["concurrency"], a["ticks"], w),
    ),
    Verb(
        "invoke",
        "send one record to a model of an endpoint",
        (_ENDPOINT, _pos("model", "MODEL", "model name"), _pos("record", "JSON", "the record", json_of(None))),
        run=lambda c, a, w: c.endpoints.invoke(a["endpoint"], a["model"], a["record"]),
    ),
    Verb(
        "endpoints",
        "list endpoints: where each serves and its instances (on a cluster, the replicas it reports)",
        mutates=False,
        run=lambda c, a, w: c.endpoints.list(),
    ),
    Verb(
        "pipeline register",
        "register the pipeline defined at MODULE:ATTR",
        (_pos("ref", "MODULE:ATTR", "pipeline object", REFERENCE),),
        run=lambda c, a, w: c.pipelines.register(a["ref"]),
    ),
    Verb(
        "pipeline run",
        "run a pipeline",
        (_pos("name", "NAME", "pipeline name", names="pipeline"),),
        (_pipeline_params(),),
        starts_work=True,
        run=lambda c, a, w: c.pipelines.run(a["name"], a["param"], w),
    ),
    Verb(
        "rerun",
        "run a pipeline again with its last parameters, plus overrides",
        (_pos("pipeline", "PIPELINE", "pipeline name", names="pipeline"),),
        (_pipeline_params(),),
        starts_work=True,
        run=lambda c, a, w: c.pipelines.rerun(a["pipeline"], a["param"], w),
    ),
    Verb(
        "pipeline resume",
        "bring back the driver of a pipeline run that lost it (settled steps are not run again)",
        (_pos("name", "NAME", "pipeline name", names="pipeline"),),
        (_pipeline_run(),),
        starts_work=True,
        run=lambda c, a, w: c.pipelines.resume(a["name"], a["run"], w),
    ),
    Verb(
        "pipeline cancel",
        "cancel a running pipeline run and its step jobs",
        (_pos("name", "NAME", "pipeline name", names="pipeline"),),
        (_pipeline_run(),),
        run=lambda c, a, w: c.pipelines.cancel(a["name"], a["run"]),
    ),
    Verb(
        "artifacts prune",
        "remove the artifacts no cache entry, run or model version references",
        run=lambda c, a, w: c.pipelines.prune_artifacts(),
    ),
    Verb("pipelines", "list pipelines and their runs", mutates=False, run=lambda c, a, w: c.pipelines.list()),
    Verb(
        "show",
        "show one object in detail",
        (
            _pos("kind", "KIND", "what to show", choice("KIND", SHOW_KINDS)),
            _pos("name", "NAME", "its name or id", names=BY_KIND),
        ),
        mutates=False,
        run=lambda c, a, w: _show(c, a["kind"], a["name"]),
    ),
    Verb(
        "help",
        "list the verbs, or explain one",
        (Positional("verb", TOPIC, "verb to explain", "VERB", required=False, rest=True),),
        mutates=False,
        run=lambda c, a, w: _help(a["verb"]),
    ),
)

VERBS: Mapping[str, Verb] = MappingProxyType({verb.name: verb for verb in _TABLE})
# first word of a multi-word verb -> its second words
FAMILIES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        first: tuple(name.split(" ", 1)[1] for name in VERBS if name.startswith(first + " "))
        for first in {name.split(" ", 1)[0] for name in VERBS if " " in name}
    }
)
FIRST_WORDS = tuple(sorted({name.split(" ", 1)[0] for name in VERBS}))
READ_ONLY_VERBS = frozenset(name for name, verb in VERBS.items() if not verb.mutates)
_KIND_OF_SHOWN = {"model": "group"}  # `show model GROUP`; every other kind names itself


def unknown_verb_message(word: str) -> str:
    """One line naming the bad verb, the closest real one and every valid verb."""
    close = get_close_matches(word.lower(), list(VERBS) + list(FAMILIES), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown verb {echo(word)}{hint}; valid: {', '.join(VERBS)}"


def help_text(verb: str | None = None) -> str:
    """The overview without an argument; for a verb, its usage and every argument; for a family such
    as `pool`, every verb in it."""
    if verb is None:
        return overview(VERBS.values())
    if verb in FAMILIES:
        return "\n\n".join(verb_help(VERBS[f"{verb} {sub}"]) for sub in FAMILIES[verb])
    if verb not in VERBS:
        raise NotFoundError(unknown_verb_message(verb))
    return verb_help(VERBS[verb])


def positional_kind(verb: Verb, index: int, words: Sequence[str]) -> str:
    """The object kind the `index`th positional of `verb` names ("" for none), given the positionals
    typed so far (`show KIND NAME` names an object of the kind typed first)."""
    if index >= len(verb.positionals):
        return ""
    names = verb.positionals[index].names
    if names == BY_KIND:
        kind = words[0] if words else ""
        return _KIND_OF_SHOWN.get(kind, kind)
    return names
