"""profiles.json and resolve_infra: precedence per field and level, atomic writes, refusal of bad input."""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest

from kinetic_tui.core import profiles
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.profiles import (
    INFRA_FIELDS,
    PROFILE_NAME_RULE,
    Profile,
    ProfilesFileError,
    active_profile,
    create_profile,
    current_profile_name,
    list_profiles,
    profiles_path,
    remove_profile,
    resolve_infra,
    show_profile,
    unset_profile,
    use_profile,
)

LOCAL = Profile("local", "local", "local")

# one distinct value per field and level; backend has only two legal values, so they alternate
VALUES = {
    "backend": {"argument": "gke", "env": "local", "profile": "gke", "default": "local"},
    "project": {"argument": "arg-proj", "env": "env-proj", "profile": "prof-proj", "default": "local"},
    "zone": {"argument": "arg-zone", "env": "env-zone", "profile": "prof-zone", "default": "us-central1-a"},
    "cluster": {"argument": "arg-cl", "env": "env-cl", "profile": "prof-cl", "default": "kinetic-cluster"},
    "namespace": {"argument": "arg-ns", "env": "env-ns", "profile": "prof-ns", "default": "default"},
}
SOURCES = {"argument": "argument", "env": "env KINETIC_{}", "profile": "profile p", "default": "default"}


def default_source(field: str) -> str:
    """With no profile chosen `local` is current: it sets backend and project, the rest are defaults."""
    return "profile local" if field in ("backend", "project") else "default"


def file_text() -> str:
    return profiles_path().read_text()


def test_fresh_home_has_local_current_and_writes_nothing(kinetic_home):
    assert list_profiles() == [LOCAL]
    assert current_profile_name() == "local"
    assert active_profile() == LOCAL
    infra = resolve_infra()
    assert (infra.backend, infra.project, infra.zone, infra.cluster, infra.namespace) == (
        "local",
        "local",
        "us-central1-a",
        "kinetic-cluster",
        "default",
    )
    assert infra.sources == {
        "backend": "profile local",
        "project": "profile local",
        "zone": "default",
        "cluster": "default",
        "namespace": "default",
    }
    assert (infra.profile, infra.profile_source) == ("local", "current")
    assert not (kinetic_home / "profiles.json").exists()


def test_home_is_created_private(tmp_path, monkeypatch):
    home = tmp_path / "deep" / "home"
    monkeypatch.setenv("KINETIC_HOME", str(home))
    create_profile("dev")
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(profiles_path().stat().st_mode) == 0o600


@pytest.mark.parametrize("level", list(SOURCES))
@pytest.mark.parametrize("field", INFRA_FIELDS)
def test_precedence_for_every_field_and_level(field, level, monkeypatch):
    create_profile("p", **{name: VALUES[name]["profile"] for name in INFRA_FIELDS}, make_current=True)
    if level == "default":
        unset_profile()
    variable = f"KINETIC_{field.upper()}"
    if level in ("argument", "env"):
        monkeypatch.setenv(variable, VALUES[field]["env"])
    arguments = {field: VALUES[field]["argument"]} if level == "argument" else {}
    infra = resolve_infra(**arguments)
    assert getattr(infra, field) == VALUES[field][level]
    expected = default_source(field) if level == "default" else SOURCES[level].format(field.upper())
    assert infra.sources[field] == expected
    for other in INFRA_FIELDS:
        if other != field:
            assert infra.sources[other] == (default_source(other) if level == "default" else "profile p")


@pytest.mark.parametrize("field", INFRA_FIELDS)
@pytest.mark.parametrize("empty", ["", "   "])
def test_empty_env_var_is_ignored(field, empty, monkeypatch):
    create_profile("p", **{name: VALUES[name]["profile"] for name in INFRA_FIELDS}, make_current=True)
    monkeypatch.setenv(f"KINETIC_{field.upper()}", empty)
    infra = resolve_infra()
    assert getattr(infra, field) == VALUES[field]["profile"]
    assert infra.sources[field] == "profile p"


def test_unset_profile_field_falls_through_to_default():
    create_profile("prod", backend="gke", project="acme", make_current=True)
    infra = resolve_infra()
    assert (infra.backend, infra.project) == ("gke", "acme")
    assert (infra.zone, infra.sources["zone"]) == ("us-central1-a", "default")
    # Kinetic needs every field in profiles.json: the defaults are written there, and the side file
    # records that they were left unset, so they keep following the defaults here
    assert json.loads(file_text())["profiles"]["prod"] == {
        "project": "acme",
        "zone": "us-central1-a",
        "cluster": "kinetic-cluster",
        "namespace": "default",
    }
    assert json.loads(profiles.side_path().read_text())["unset"] == {"prod": ["zone", "cluster", "namespace"]}
    assert show_profile("prod") == Profile("prod", "gke", "acme")


def test_profile_selection_order(monkeypatch):
    create_profile("a", project="proj-a")  # the first profile made while `local` is current becomes current
    create_profile("b", project="proj-b")
    assert resolve_infra().profile == "a"
    monkeypatch.setenv("KINETIC_PROFILE", "a")
    infra = resolve_infra()
    assert (infra.profile, infra.profile_source, infra.project) == ("a", "env KINETIC_PROFILE", "proj-a")
    infra = resolve_infra(profile="b")
    assert (infra.profile, infra.profile_source, infra.project) == ("b", "argument", "proj-b")
    assert show_profile().name == "a"
    monkeypatch.setenv("KINETIC_PROFILE", "")
    assert resolve_infra().profile == "a"
    unset_profile()
    assert resolve_infra().profile == "local"


def test_unknown_profile_lists_existing(monkeypatch):
    create_profile("dev")
    with pytest.raises(NotFoundError, match=r"no profile 'nope'; existing profiles: dev, local"):
        resolve_infra(profile="nope")
    monkeypatch.setenv("KINETIC_PROFILE", "ghost")
    with pytest.raises(NotFoundError, match="ghost"):
        resolve_infra()
    for verb in (use_profile, remove_profile, show_profile):
        with pytest.raises(NotFoundError, match="existing profiles: dev, local"):
            verb("nope")


@pytest.mark.parametrize(
    "arguments,env,message",
    [
        ({"backend": "k8s"}, {}, "backend 'k8s' is not one of local, gke"),
        ({}, {"KINETIC_BACKEND": "aws"}, "KINETIC_BACKEND: backend 'aws' is not one of local, gke"),
        ({"zone": "US Central"}, {}, "zone 'US Central' must match"),
        ({}, {"KINETIC_CLUSTER": "a/b"}, "KINETIC_CLUSTER: cluster 'a/b' must match"),
        ({"project": ""}, {}, "project '' must match"),
        ({"profile": "bad name"}, {}, "--profile 'bad name' must match"),
        ({}, {"KINETIC_PROFILE": "-x"}, "KINETIC_PROFILE: profile name '-x' must match"),
    ],
)
def test_bad_values_name_the_field_and_rule(arguments, env, message, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as info:
        resolve_infra(**arguments)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_gke_needs_a_project():
    unset_profile()
    with pytest.raises(ValidationError, match="backend gke needs a project"):
        resolve_infra(backend="gke")
    assert resolve_infra(backend="gke", project="acme").project == "acme"
    with pytest.raises(ValidationError, match="needs a project"):
        create_profile("g", backend="gke")
    assert not profiles_path().exists() or '"g"' not in file_text()


def test_bucket_and_stack_names():
    infra = resolve_infra(backend="gke", project="acme-ml", cluster="train", zone="europe-west4-b")
    assert infra.jobs_bucket == "acme-ml-kn-train-jobs"
    assert infra.state_bucket == "acme-ml-kinetic-state"
    assert infra.stack == "acme-ml-train"
    assert infra.region == "europe-west4"
    local = resolve_infra()
    assert local.jobs_bucket == "local-kn-kinetic-cluster-jobs"
    assert local.state_bucket == "local-kinetic-state"
    assert profiles.zone_region("us-central1") == "us-central1"


def test_rows_for_config_show(monkeypatch):
    monkeypatch.setenv("KINETIC_ZONE", "asia-east1-a")
    rows = resolve_infra(cluster="c1").rows()
    assert rows == [
        ("profile", "local", "current"),
        ("backend", "local", "profile local"),
        ("project", "local", "profile local"),
        ("zone", "asia-east1-a", "env KINETIC_ZONE"),
        ("cluster", "c1", "argument"),
        ("namespace", "default", "default"),
    ]


def test_verbs_create_ls_use_unset_show_rm():
    created = create_profile("prod", backend="gke", project="acme", zone="us-east1-b", cluster="big", namespace="ml")
    assert created == Profile("prod", "gke", "acme", "us-east1-b", "big", "ml")
    assert [p.name for p in list_profiles()] == ["local", "prod"]
    assert current_profile_name() == "prod"  # the first profile becomes current, as in Kinetic
    assert use_profile("local") == LOCAL and current_profile_name() == "local"
    assert use_profile("prod") == created and current_profile_name() == "prod"
    assert show_profile() == created and show_profile("local") == LOCAL
    with pytest.raises(ValidationError, match="is the current profile; run `profile use OTHER` or `profile unset`"):
        remove_profile("prod")
    with pytest.raises(ValidationError, match="'local' is built in and cannot be removed"):
        remove_profile("local")
    assert unset_profile() == "prod"  # it reports the profile that was current
    assert unset_profile() is None
    assert current_profile_name() == "local" and active_profile() == LOCAL and show_profile() == LOCAL
    infra = resolve_infra()
    assert (infra.profile, infra.profile_source, infra.backend, infra.project) == ("local", "current", "local", "local")
    assert remove_profile("prod").name == "prod"
    assert list_profiles() == [LOCAL]
    with pytest.raises(NotFoundError, match="existing profiles: local"):
        use_profile("prod")


def test_create_refuses_duplicates_and_can_make_current():
    create_profile("dev", make_current=True)
    assert current_profile_name() == "dev"
    before = file_text()
    with pytest.raises(ValidationError, match="profile 'dev' already exists; existing profiles: dev, local"):
        create_profile("dev", project="other")
    assert file_text() == before


@pytest.mark.parametrize("name", ["", "-dev", "_dev", "a" * 65, "has space", "a/b", "a.b", "ä", "dev\n", None, 7])
def test_invalid_names_are_refused_and_nothing_is_written(name):
    verbs = (create_profile, use_profile, remove_profile) + ((show_profile,) if name is not None else ())
    for verb in verbs:
        with pytest.raises(ValidationError) as info:
            verb(name)
        assert PROFILE_NAME_RULE in str(info.value)
    assert not profiles_path().exists()
    create_profile("ok")
    before = file_text()
    with pytest.raises(ValidationError):
        create_profile(name)
    assert file_text() == before


@pytest.mark.parametrize("name", ["a", "A" * 64, "0-_x", "Prod_2"])
def test_valid_edge_names(name):
    assert create_profile(name).name == name
    assert use_profile(name).name == name


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"backend": "aws"}, "backend 'aws' is not one of local, gke"),
        ({"zone": "Zone A"}, "zone 'Zone A' must match"),
        ({"project": "x y"}, "project 'x y' must match"),
    ],
)
def test_create_validates_fields_first(fields, message):
    with pytest.raises(ValidationError, match=message):
        create_profile("p", **fields)
    assert not profiles_path().exists()


def test_failed_replace_keeps_the_old_file(kinetic_home, monkeypatch):
    create_profile("dev")
    before = file_text()

    def crash(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", crash)
        with pytest.raises(ProfilesFileError, match=r"cannot write .*profiles\.json: .*No space left"):
            create_profile("prod")
    assert file_text() == before
    assert [p.name for p in list_profiles()] == ["dev", "local"]
    assert sorted(path.name for path in kinetic_home.iterdir()) == [
        ".profiles.lock",
        "profiles.json",
        "tui-profiles.json",
    ]


@pytest.mark.parametrize(
    "content,detail",
    [
        ("{not json", "invalid JSON at line 1"),
        ("[]", "expected"),
        ('{"current": "local"}', "expected"),
        ('{"current": "x", "profiles": {}}', "current profile 'x' is not defined"),
        ('{"current": null, "profiles": {"a": {"backend": "aws"}}}', "profile 'a': backend 'aws'"),
        ('{"current": null, "profiles": {"a": []}}', "profile 'a': expected an object"),
        ('{"current": null, "profiles": {"bad name": {"backend": "local"}}}', "must match"),
        ('{"current": null, "profiles": {"a": {"backend": "local", "zone": 5}}}', "zone 5 must match"),
    ],
)
def test_corrupt_file_is_a_clear_error_never_a_reset(content, detail):
    path = profiles_path()
    path.write_text(content)
    for call in (list_profiles, resolve_infra, lambda: create_profile("new"), lambda: use_profile("local")):
        with pytest.raises(ProfilesFileError) as info:
            call()
        message = str(info.value)
        assert str(path) in message and detail in message and "\n" not in message
    assert path.read_text() == content


def test_concurrent_creates_lose_nothing():
    names = [f"p{i}" for i in range(8)]
    threads = [threading.Thread(target=create_profile, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [p.name for p in list_profiles()] == ["local", *names]
