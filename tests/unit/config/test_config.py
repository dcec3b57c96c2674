"""Configuration: the embedded default is valid; bad files fail with one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_settings

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", ["local.yaml", "test.yaml", "cluster.example.yaml"])
def test_shipped_confs_are_valid(name: str) -> None:
    settings = load_settings(ROOT / "conf" / name, env={})
    assert settings.topics.requests
    assert settings.destination_of(next(iter(settings.topics.outputs))) in {
        d for s in settings.subscriptions for d in s.destinations}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "key", "problem"), [
    ("stream:\n  trigger_interval: soon\n", "stream.trigger_interval", "5 seconds"),
    ("topics:\n  outputs: {t1: TOOLONGNAME}\n", "topics.outputs", "1-8 character"),
    ("stream:\n  gaps:\n    landing_policy: later\n", "stream.gaps.landing_policy", "immediate"),
    ("stream:\n  lake: x\n", "stream.lake", "Extra inputs"),
    ("replicator:\n  request_token: MUCHTOOLONG\n", "replicator.request_token", "1-8"),
    ("kafka:\n  security_protocol: SASL_SSL\n", "kafka", "sasl_mechanism"),
    ("subscriptions:\n  - name: C\n    initial_state: IC\n    destinations: ["
     + ", ".join(f"D{i}" for i in range(36)) + "]\n", "subscriptions.0", "at most 35"),
])
def test_invalid_conf_is_one_line_naming_key(tmp_path: Path, text: str, key: str,
                                             problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(_write(tmp_path, text), env={})
    message = str(err.value)
    assert "\n" not in message
    assert f": {key}: " in message
    assert problem in message


def test_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="line 2 is not valid YAML"):
        load_settings(_write(tmp_path, "a: 1\n b: [\n"), env={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "absent.yaml", env={})


def test_environment_overrides_hosts_and_secrets(tmp_path: Path) -> None:
    env = {"URBPIPE__KAFKA__BOOTSTRAP_SERVERS": "b1:9093,b2:9093",
           "URBPIPE__KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
           "URBPIPE__KAFKA__SASL_MECHANISM": "PLAIN",
           "URBPIPE__KAFKA__SASL_USERNAME": "svc",
           "URBPIPE__KAFKA__SASL_PASSWORD": "s3cret",
           "URBPIPE__STREAM__SHUFFLE_PARTITIONS": "8"}
    settings = load_settings(ROOT / "conf" / "local.yaml", env=env)
    assert settings.kafka.confluent()["bootstrap.servers"] == "b1:9093,b2:9093"
    assert settings.kafka.confluent()["sasl.password"] == "s3cret"
    assert 'password="s3cret"' in settings.kafka.spark()["kafka.sasl.jaas.config"]
    assert settings.stream.shuffle_partitions == 8


def test_locations_resolve_against_project_and_keep_uris() -> None:
    settings = load_settings(ROOT / "conf" / "local.yaml", env={})
    assert settings.location(".lake") == str(ROOT / ".lake")
    assert settings.location("s3a://bucket/lake") == "s3a://bucket/lake"


def test_subscription_destination_must_be_carried_by_a_topic(tmp_path: Path) -> None:
    text = "subscriptions:\n  - name: COLOR\n    destinations: [NOWHERE]\n"
    with pytest.raises(ConfigError, match="NOWHERE"):
        load_settings(_write(tmp_path, text), env={})


def test_layout_field_range_and_variable_fields_from_yaml(tmp_path: Path) -> None:
    """A conf FDT keeps the order it is written in: a field range follows it."""
    text = ("layouts:\n  - subscription: COLOR\n    dbid: 10006\n    fnr: 4\n"
            "    format_buffer: 'AA,AE-AB.'\n"
            "    fdt: {AA: '8,A', AE: '0,A,LA', AD: '4,P,2', AB: '2,B'}\n")
    layout = load_settings(_write(tmp_path, text), env={}).layouts[0].conf_layout()
    assert layout is not None
    assert [(i.name, i.length, i.prefix) for i in layout.items] == [  # type: ignore[union-attr]
        ("AA", 8, 1), ("AE", 0, 2), ("AD", 4, 1), ("AB", 2, 1)]
    reversed_range = r"layouts\.0: format_buffer: field range AB-AE: AE comes before AB"
    with pytest.raises(ConfigError, match=reversed_range):
        load_settings(_write(tmp_path, text.replace("AE-AB", "AB-AE")), env={})


# -- a key written twice is refused, naming it and both lines ----------------------------------

def test_a_key_written_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    conf = _write(tmp_path, "kafka:\n  bootstrap_servers: a:1\n  security_protocol: SSL\n"
                            "stream:\n  lake_dir: x\nkafka:\n  bootstrap_servers: b:2\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: key 'kafka' is written twice "
                                          r"\(lines 1 and 6\)$"):
        load_settings(conf, env={})
    conf = _write(tmp_path, "kafka:\n  security_protocol: SSL\n  bootstrap_servers: a:1\n"
                            "  security_protocol: PLAINTEXT\n")
    with pytest.raises(ConfigError, match=r"key 'kafka\.security_protocol' is written twice "
                                          r"\(lines 2 and 4\)"):
        load_settings(conf, env={})


def test_a_key_written_twice_inside_a_list_names_its_place(tmp_path: Path) -> None:
    conf = _write(tmp_path, "subscriptions:\n  - name: A\n    dbid: 1\n    dbid: 2\n")
    with pytest.raises(ConfigError, match=r"key 'subscriptions\[0\]\.dbid' is written twice"):
        load_settings(conf, env={})


def test_merge_keys_may_repeat(tmp_path: Path) -> None:
    conf = _write(tmp_path, "x: &a {trigger_interval: 1 minute}\ny: &b {lake_dir: l}\n"
                            "stream:\n  <<: *a\n  <<: *b\n")
    with pytest.raises(ConfigError, match=r": x: "):  # unknown top-level key, not a duplicate
        load_settings(conf, env={})


def test_a_duplicate_key_is_exit_2_for_the_cli_and_the_job(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from pipeline.ops import cli

    conf = _write(tmp_path, "kafka:\n  security_protocol: SSL\n  security_protocol: SSL\n")
    assert cli.main(["--conf-file", str(conf), "status"]) == 2
    assert "is written twice (lines 2 and 3)" in capsys.readouterr().err
    spec = importlib.util.spec_from_file_location("stream_job", ROOT / "jobs" / "stream.py")
    assert spec and spec.loader
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    assert job.main(["--conf-file", str(conf)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is written twice (lines 2 and 3)" in err


def test_rig_keys_in_product_sections_are_still_read_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Older confs keep the rig's keys in product sections; they move to ``devtools`` (the
    job never reads them) and the warning says where they belong."""
    from devtools.config import rig

    conf = _write(tmp_path, "kafka:\n  local_broker:\n    port: 19555\n"
                  "subscriptions:\n  - name: EMPLOYEE\n    files: [11]\n    images: after\n")
    with caplog.at_level("WARNING", logger="urbpipe.config"):
        settings = load_settings(conf, env={})
    assert "kafka.local_broker -> devtools.local_broker" in caplog.text
    assert "subscriptions[EMPLOYEE].{images} -> devtools.subscriptions.EMPLOYEE" in caplog.text
    assert "local_broker" not in settings.kafka.model_dump()
    assert rig(settings).local_broker.port == 19555
    assert rig(settings).subscription("EMPLOYEE").images == "after"
    assert rig(settings).subscription("COLOR").images == "both"


def test_an_invalid_rig_key_is_one_line_naming_it(tmp_path: Path) -> None:
    from devtools.config import rig

    settings = load_settings(_write(tmp_path, "devtools:\n  local_broker:\n    port: 80\n"),
                             env={})  # the job does not read it: no error at its start
    with pytest.raises(ConfigError, match=r"^devtools\.local_broker\.port: .*greater than"):
        rig(settings)
