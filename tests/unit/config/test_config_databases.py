"""Subscriptions over several databases in conf: the two forms of ``files``, the (dbid, fnr)
list, the primary database, and the typed tables' one naming function (issue 35)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import (
    ConfigError,
    Layout,
    Settings,
    load_settings,
    typed_table_suffix,
)
from pipeline.typed.lifecycle import Target

ROOT = Path(__file__).resolve().parents[3]
FB = "format_buffer: 'AA,8,A.'"


def _load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_settings(path, env={})


def test_old_and_new_forms_give_the_same_file_keys(tmp_path: Path) -> None:
    old = _load(tmp_path, "subscriptions:\n  - name: COLOR\n    dbid: 10006\n    files: [4, 9]\n")
    new = _load(tmp_path, "subscriptions:\n  - name: COLOR\n    files: [{dbid: 10006, fnr: 4},"
                          " {dbid: 10006, fnr: 9}]\n")
    assert old.subscriptions[0].file_keys() == new.subscriptions[0].file_keys() == (
        (10006, 4), (10006, 9))
    assert new.subscriptions[0].dbid == 10006
    plain = _load(tmp_path, "subscriptions:\n  - name: COLOR\n")
    assert plain.subscriptions[0].file_keys() == ((10006, 4),)  # the defaults, as before


def test_mixed_files_take_dbid_and_the_primary_is_dbid_or_the_first_pair(tmp_path: Path) -> None:
    mixed = _load(tmp_path, "subscriptions:\n  - name: COLOR\n    dbid: 10007\n"
                            "    files: [{dbid: 10006, fnr: 4}, 4, 9]\n").subscriptions[0]
    assert mixed.file_keys() == ((10006, 4), (10007, 4), (10007, 9))
    # pairs of the primary database read as plain numbers (what the job's engine takes today)
    pairs_of_primary = _load(tmp_path, "subscriptions:\n  - name: COLOR\n    files: [{dbid: 7, "
                                       "fnr: 4}, {dbid: 8, fnr: 4}, {dbid: 7, fnr: 9}]\n")
    assert [f if isinstance(f, int) else (f.dbid, f.fnr)
            for f in pairs_of_primary.subscriptions[0].files] == [4, (8, 4), 9]
    assert (mixed.dbid, mixed.databases()) == (10007, (10007, 10006))
    assert mixed.files_of(10007) == (4, 9)
    pairs = _load(tmp_path, "subscriptions:\n  - name: COLOR\n    files: [{dbid: 7, fnr: 4}, "
                            "{dbid: 10006, fnr: 4}]\n").subscriptions[0]
    assert (pairs.dbid, pairs.databases()) == (7, (7, 10006))


@pytest.mark.parametrize(("files", "problem"), [
    ("[{dbid: 7, fnr: 4}, 4]", "give dbid, the database of the plain numbers"),
    ("[{dbid: 10006, fnr: 4}, {dbid: 10006, fnr: 4}]", "database 10006 file 4 twice"),
    ("[{dbid: 7}]", "entry 0 ({'dbid': 7}) must be {dbid: N, fnr: N}"),
    ("[{fnr: 4}]", "entry 0 ({'fnr': 4}) must be {dbid: N, fnr: N}"),
    ("[four]", "entry 0 ('four') is neither a file number nor {dbid: N, fnr: N}"),
    ("[]", "at least 1"),
])
def test_bad_files_are_one_line(tmp_path: Path, files: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, f"subscriptions:\n  - name: COLOR\n    files: {files}\n")
    assert "\n" not in str(err.value) and problem in str(err.value)
    assert ": subscriptions.0" in str(err.value)


def test_a_file_of_another_database_gets_its_dbid_in_the_name(tmp_path: Path) -> None:
    s = _load(tmp_path, "subscriptions:\n  - name: COLOR\n    dbid: 10006\n"
                        "    files: [4, {dbid: 10007, fnr: 4}]\nlayouts:\n"
                        f"  - {{subscription: COLOR, dbid: 10006, fnr: 4, {FB}}}\n"
                        f"  - {{subscription: COLOR, dbid: 10007, fnr: 4, {FB}}}\n")
    assert [lay.table_suffix() for lay in s.layouts] == ["color_4", "color_10007_4"]
    assert [s.table_suffix("COLOR", lay.dbid, lay.fnr) for lay in s.layouts] == [
        "color_4", "color_10007_4"]
    from pipeline.spark.typed.file_status import config_targets

    assert [t.suffix for t in config_targets(s)] == ["color_4", "color_10007_4"]


def test_copies_of_settings_bind_new_layouts_to_their_primary(tmp_path: Path) -> None:
    """Tests and tools make Settings with ``model_copy(update=...)``: the new layouts'
    names must know their subscription's primary database all the same."""
    s = _load(tmp_path, "subscriptions:\n  - name: COLOR\n    files: [{dbid: 10006, fnr: 4}, "
                        "{dbid: 10007, fnr: 4}]\n")
    other = Layout(subscription="COLOR", dbid=10007, fnr=4, format_buffer="AA,8,A.")
    assert other.table_suffix() == "color_4"  # alone it cannot know: taken as primary
    copied = s.model_copy(update={"layouts": [other]})
    assert copied.layouts[0].table_suffix() == "color_10007_4"
    assert other.primary_dbid is None, "the caller's layout is left as it was"


def test_the_naming_function_keeps_existing_names() -> None:
    assert typed_table_suffix("COLOR", 10006, 4) == "color_4"
    assert typed_table_suffix("COLOR", 10006, 4, 10006) == "color_4"
    assert typed_table_suffix("COLOR", 10007, 4, 10006) == "color_10007_4"
    assert Target("COLOR", 10007, 4, 10006).suffix == "color_10007_4"
    shipped = load_settings(ROOT / "conf" / "test.yaml", env={})
    assert [lay.table_suffix() for lay in shipped.layouts] == ["color_4", "employee_11"]


@pytest.mark.parametrize(("text", "problem"), [
    ("subscriptions:\n  - {name: A, dbid: 1, files: [{dbid: 7, fnr: 4}]}\n"
     "  - {name: A_7, dbid: 1, files: [4]}\n",
     "subscription files A/7/4 and A_7/1/4 would both write the typed tables *_a_7_4"),
    ("subscriptions:\n  - {name: COLOR}\n  - {name: color}\n",
     "COLOR/10006/4 and color/10006/4 would both write the typed tables *_color_4"),
    ("subscriptions:\n  - {name: COLOR}\n"
     f"layouts:\n  - {{subscription: COLOR, dbid: 10007, fnr: 4, {FB}}}\n",
     "layout COLOR/10007/4: subscription COLOR does not list database 10007 file 4"),
    ("subscriptions:\n  - {name: COLOR}\n"
     f"layouts:\n  - {{subscription: COLOR, dbid: 10006, fnr: 4, {FB}}}\n"
     f"  - {{subscription: COLOR, dbid: 10006, fnr: 4, {FB}}}\n",
     "layout COLOR/10006/4 is given twice"),
    ("subscriptions:\n  - {name: COLOR}\n"
     f"layouts:\n  - {{subscription: OTHER, dbid: 10006, fnr: 4, {FB}}}\n",
     "layout OTHER/10006/4 names a subscription the subscriptions section does not list"),
])
def test_colliding_or_unlisted_typed_tables_are_refused_at_load(tmp_path: Path, text: str,
                                                                 problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert "\n" not in str(err.value) and problem in str(err.value)


def test_the_request_cli_asks_for_every_database_of_a_definition(tmp_path: Path) -> None:
    from pipeline.ops.requests_cmd import definition_files

    s = _load(tmp_path, "subscriptions:\n  - name: COLOR\n    initial_state: ICOLOR\n"
                        "    files: [{dbid: 10006, fnr: 4}, {dbid: 10007, fnr: 4}]\n")
    assert definition_files(s, "ICOLOR") == [(10006, 4), (10007, 4)]
