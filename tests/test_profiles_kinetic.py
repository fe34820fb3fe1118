"""profiles.json shared with Kinetic, in both directions, and the migration of this product's older layout.

Kinetic's loader (its documented and observed behaviour, checked by `kinetic_accepts` below): the file is an
object whose `current` is a name or null and whose `profiles` maps names to objects that must each hold
`project`, `zone` and `cluster` (`namespace` defaults to "default"); a `current` naming no profile is
dropped; when Kinetic writes the file back it keeps only those four fields per profile (sorted keys).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kinetic_tui.core.profile_store import LOCAL
from kinetic_tui.core.profiles import (
    Profile,
    create_profile,
    current_profile_name,
    ensure_profiles_file,
    list_profiles,
    profiles_path,
    remove_profile,
    resolve_infra,
    show_profile,
    side_path,
    unset_profile,
    use_profile,
)

KINETIC_FIELDS = ("project", "zone", "cluster", "namespace")

# What Kinetic's own `profile create` writes (json.dump with indent=2 and sorted keys).
KINETIC_FILE = {
    "current": "dev-tpu",
    "profiles": {
        "dev-tpu": {"cluster": "tpu-c", "namespace": "default", "project": "acme-ml", "zone": "us-central2-b"},
        "prod": {"cluster": "big", "namespace": "train", "project": "acme-prod", "zone": "europe-west4-a"},
    },
}


def kinetic_accepts(path: Path) -> tuple[str | None, dict[str, dict[str, str]]]:
    """(current, profiles) as Kinetic's loader sees `path`; an AssertionError where it would refuse it."""
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    current = data.get("current")
    assert current is None or isinstance(current, str)
    raw = data.get("profiles", {})
    assert isinstance(raw, dict)
    profiles = {}
    for name, fields in raw.items():
        assert isinstance(fields, dict)
        for required in ("project", "zone", "cluster"):
            assert isinstance(fields.get(required), str), (name, required, fields)
        assert isinstance(fields.get("namespace", "default"), str)
        assert set(fields) <= set(KINETIC_FIELDS), f"Kinetic would drop {set(fields) - set(KINETIC_FIELDS)}"
        profiles[name] = {field: fields.get(field, "default") for field in KINETIC_FIELDS}
    return (current if current in profiles else None), profiles


def kinetic_writes_back(path: Path, current: str | None, profiles: dict[str, dict[str, str]]) -> None:
    path.write_text(json.dumps({"current": current, "profiles": profiles}, indent=2, sort_keys=True) + "\n")


def write(document: dict[str, Any]) -> None:
    profiles_path().write_text(json.dumps(document, indent=2))


# -- a file Kinetic wrote works here ---------------------------------------------------------------------


def test_a_kinetic_file_loads_as_gke_profiles_with_its_current() -> None:
    write(KINETIC_FILE)
    assert list_profiles() == [
        Profile("dev-tpu", "gke", "acme-ml", "us-central2-b", "tpu-c", "default"),
        LOCAL,
        Profile("prod", "gke", "acme-prod", "europe-west4-a", "big", "train"),
    ]
    assert current_profile_name() == "dev-tpu"
    infra = resolve_infra()
    assert (infra.backend, infra.project, infra.zone, infra.cluster, infra.namespace) == (
        "gke",
        "acme-ml",
        "us-central2-b",
        "tpu-c",
        "default",
    )
    assert infra.sources["backend"] == "profile dev-tpu"


def test_a_kinetic_file_without_current_leaves_local_current_and_namespace_defaults() -> None:
    write({"current": None, "profiles": {"x": {"project": "p", "zone": "us-east1-b", "cluster": "c"}}})
    assert current_profile_name() == "local"
    assert show_profile("x") == Profile("x", "gke", "p", "us-east1-b", "c")
    create_profile("sandbox")  # the first named profile made here while `local` is current becomes current
    assert current_profile_name() == "sandbox"


def test_changes_made_here_keep_kinetic_s_profiles_and_stay_loadable_by_kinetic() -> None:
    write(KINETIC_FILE)
    create_profile("sandbox", backend="local")
    create_profile("west", backend="gke", project="acme-ml", zone="us-west1-a")
    use_profile("sandbox")
    current, profiles = kinetic_accepts(profiles_path())
    assert current is None  # a local profile is current: Kinetic sees no current profile, which it allows
    assert profiles == {
        **KINETIC_FILE["profiles"],
        "west": {"cluster": "kinetic-cluster", "namespace": "default", "project": "acme-ml", "zone": "us-west1-a"},
    }
    assert "sandbox" not in profiles and "local" not in profiles
    use_profile("prod")
    assert kinetic_accepts(profiles_path())[0] == "prod"
    assert unset_profile() == "prod"
    assert kinetic_accepts(profiles_path())[0] is None and current_profile_name() == "local"


def test_a_kinetic_write_back_loses_nothing_of_this_product_s_settings() -> None:
    write(KINETIC_FILE)
    create_profile("sandbox", backend="local", zone="asia-east1-a")
    create_profile("lean", backend="gke", project="acme-ml")  # zone, cluster, namespace left unset
    use_profile("sandbox")
    before = list_profiles()
    _, profiles = kinetic_accepts(profiles_path())
    profiles["dev-tpu"]["zone"] = "us-east5-a"  # Kinetic's `profile create --force dev-tpu --zone ...`
    kinetic_writes_back(profiles_path(), "dev-tpu", profiles)
    after = {p.name: p for p in list_profiles()}
    assert after["sandbox"] == Profile("sandbox", "local", "local", "asia-east1-a")
    assert after["lean"] == Profile("lean", "gke", "acme-ml")  # still following the defaults here
    assert after["dev-tpu"].zone == "us-east5-a" and current_profile_name() == "dev-tpu"
    assert {p.name for p in before} == set(after)
    assert resolve_infra(profile="lean").sources["zone"] == "default"


def test_this_product_s_files_alone_load_in_kinetic() -> None:
    create_profile("prod", backend="gke", project="acme", zone="us-east1-b", cluster="big", namespace="ml")
    create_profile("sandbox", backend="local")
    ensure_profiles_file()
    current, profiles = kinetic_accepts(profiles_path())
    assert (current, list(profiles)) == ("prod", ["prod"])
    assert json.loads(side_path().read_text())["profiles"] == {"sandbox": {"backend": "local", "project": "local"}}


def test_local_is_virtual_and_never_written_to_profiles_json() -> None:
    ensure_profiles_file()
    assert json.loads(profiles_path().read_text()) == {"current": None, "profiles": {}}
    use_profile("local")
    assert "local" not in json.loads(profiles_path().read_text())["profiles"]
    with pytest.raises(ValueError, match="'local' is built in; choose another name"):
        create_profile("local", backend="gke", project="acme")
    with pytest.raises(ValueError, match="built in and cannot be removed"):
        remove_profile("local")


def test_the_profiles_file_of_kinetic_profiles_file_is_honoured(tmp_path: Path, monkeypatch) -> None:
    elsewhere = tmp_path / "shared" / "kinetic-profiles.json"
    elsewhere.parent.mkdir()
    elsewhere.write_text(json.dumps(KINETIC_FILE))
    monkeypatch.setenv("KINETIC_PROFILES_FILE", str(elsewhere))
    assert current_profile_name() == "dev-tpu"
    create_profile("sandbox", backend="local")
    assert (elsewhere.parent / "tui-profiles.json").exists()


# -- migrating this product's older layout ---------------------------------------------------------------

LEGACY = {
    "current": "prod",
    "profiles": {
        "local": {"backend": "local", "project": "local", "zone": None, "cluster": None, "namespace": None},
        "prod": {"backend": "gke", "project": "acme", "zone": None, "cluster": "big", "namespace": None},
        "lab": {"backend": "local", "project": "local", "zone": "us-east1-b", "cluster": None, "namespace": "x"},
    },
}


@pytest.mark.parametrize("current", ["prod", "lab", "local", None])
def test_an_older_file_of_this_product_migrates_without_losing_anything(current: str | None) -> None:
    write({**LEGACY, "current": current})
    before = list_profiles()
    assert before == [
        Profile("lab", "local", "local", "us-east1-b", None, "x"),
        LOCAL,
        Profile("prod", "gke", "acme", None, "big", None),
    ]
    assert current_profile_name() == (current or "local")
    ensure_profiles_file()  # `init` (and any change) rewrites it in the split layout
    assert list_profiles() == before and current_profile_name() == (current or "local")
    kinetic_current, profiles = kinetic_accepts(profiles_path())
    assert profiles == {"prod": {"cluster": "big", "namespace": "default", "project": "acme", "zone": "us-central1-a"}}
    assert kinetic_current == (current if current == "prod" else None)
    assert resolve_infra(profile="prod").sources["zone"] == "default"
