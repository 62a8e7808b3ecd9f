"""Config: durations, defaults, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkwarden.base.errors import ConfigError
from sparkwarden.config import schema as cfg
from sparkwarden.config import secrets

MINIMAL = {"llm": {"containers": ["vllm-35b"], "base_url": "http://127.0.0.1:8000"}}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("20m", 1200),
        ("20h", 72000),
        ("1h30m", 5400),
        (45, 45),
        (2.5, 2.5),
        ("120", 120),
        ("0.2s", 0.2),
        ("500ms", 0.5),
        ("1d", 86400),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert cfg.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "ten", "5 parsecs", "-3s", "3x", True, [1], "1h-5m"])
def test_bad_durations_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        cfg.parse_duration(bad)


@given(st.floats(min_value=0, max_value=1e7, allow_nan=False).map(lambda f: round(f, 3)))
def test_format_duration_round_trips(seconds: float) -> None:
    assert cfg.parse_duration(cfg.format_duration(seconds)) == pytest.approx(seconds)


def test_defaults_fill_everything_but_the_two_required_keys() -> None:
    config = cfg.parse(MINIMAL)
    assert config.llm.stop_timeout == 120
    assert config.llm.health_timeout == 1200
    assert config.llm.probe_timeout == 180
    assert config.voice.mode == "pause"
    assert config.memory.start_min_available_gib == 60
    assert config.memory.start_wait == 180
    assert config.state.dir == Path("/var/lib/sparkwarden")


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ({}, "llm: required key is missing"),
        ({"llm": {"containers": ["a"]}}, "llm.base_url: required key is missing"),
        ({"llm": {**MINIMAL["llm"], "stop_timout": "1s"}}, "llm.stop_timout: unknown key"),
        ({"llm": {**MINIMAL["llm"], "stop_timeout": "soon"}}, "llm.stop_timeout: invalid duration"),
        ({"llm": {**MINIMAL["llm"], "containers": []}}, "llm.containers"),
        ({"llm": {**MINIMAL["llm"], "containers": ["a", "a"]}}, "listed more than once: a"),
        ({"llm": {**MINIMAL["llm"], "base_url": "localhost:8000"}}, "llm.base_url"),
        ({**MINIMAL, "voice": {"mode": "freeze"}}, "voice.mode"),
        ({**MINIMAL, "memory": {"start_min_available_gib": -1}}, "memory.start_min_available_gib"),
        ({**MINIMAL, "voice": {"containers": ["vllm-35b"]}}, "both llm and voice: vllm-35b"),
    ],
)
def test_errors_name_the_key(data: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        cfg.parse(data)


def test_load_reports_toml_syntax_with_the_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[llm]\ncontainers = ["a"\n')
    with pytest.raises(ConfigError, match=f"{path}: not valid TOML"):
        cfg.load(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        cfg.load(tmp_path / "absent.toml")


def test_path_resolution_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cfg.ENV_PATH, raising=False)
    assert cfg.resolve_path(None) == cfg.DEFAULT_PATH
    monkeypatch.setenv(cfg.ENV_PATH, "/tmp/from-env.toml")
    assert cfg.resolve_path(None) == Path("/tmp/from-env.toml")
    assert cfg.resolve_path("/tmp/explicit.toml") == Path("/tmp/explicit.toml")


def test_api_key_is_read_from_its_file_and_not_printed(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("sk-very-secret\n")
    config = cfg.parse({"llm": {**MINIMAL["llm"], "api_key_file": str(key)}})
    assert config.llm.api_key() == "sk-very-secret"
    assert "sk-very-secret" not in str(cfg.effective(config))


def test_effective_config_parses_back_to_the_same() -> None:
    config = cfg.parse({**MINIMAL, "memory": {"start_wait": "90s"}})
    assert cfg.parse(cfg.effective(config)) == config
    assert cfg.effective(config)["memory"]["start_wait"] == "90s"


SHIPPED = Path(__file__).resolve().parents[2] / "config" / "sparkwarden.toml"  # a symlink


def test_shipped_config_is_valid_complete_and_says_the_defaults() -> None:
    import tomllib

    shipped = tomllib.loads(SHIPPED.read_text())
    config = cfg.load(SHIPPED)
    defaults = cfg.effective(cfg.parse({"llm": shipped["llm"]}))
    assert cfg.effective(config) == defaults  # the file states the schema's defaults, no other
    text = SHIPPED.read_text()
    for section, values in defaults.items():
        if isinstance(values, list):  # an array of tables, shown as a commented example
            assert f"# [[{section}]]" in text
            continue
        assert set(values) <= set(shipped[section]), f"[{section}] misses keys"
    for optional in ("api_key_file", "model", "timezone", "url_file", "events", "min_interval"):
        assert f"# {optional} = " in text
    assert "# [gateway]" in text  # optional, shown commented with every key of its schema
    for key in cfg.GatewayConfig.model_fields:
        assert f"# {key} = " in text.split("# [gateway]", 1)[1], key
    # [cluster] too (issue 36 item 5.10): every key, and the example, uncommented, is valid
    cluster = text.split("# [cluster]", 1)[1]
    for key in [*cfg.ClusterConfig.model_fields, *cfg.ClusterNode.model_fields]:
        assert f"# {key} = " in cluster or key == "nodes", key
    uncommented = "\n".join(line.removeprefix("# ") for line in cluster.splitlines())
    example = tomllib.loads("[cluster]\n" + uncommented)
    assert cfg.parse({"llm": shipped["llm"], **example}).cluster is not None
    # [replicas] likewise: every key shown, and its example valid
    replicas = text.split("# [replicas]", 1)[1].split("# Several Sparks serving one engine")[0]
    for key in [*cfg.ReplicasConfig.model_fields, *cfg.ReplicaNode.model_fields]:
        assert f"# {key} = " in replicas or key == "nodes", key
    uncommented = "\n".join(line.removeprefix("# ") for line in replicas.splitlines())
    example = tomllib.loads("[replicas]\n" + uncommented)
    assert cfg.parse({"llm": shipped["llm"], **example}).replicas is not None


REPLICAS = {
    "self": "spark2",
    "nodes": [{"name": "spark1", "ssh": "root@spark1"}, {"name": "spark2", "ssh": "root@s2"}],
}


def test_replicas_name_this_spark_among_distinct_nodes_and_exclude_a_cluster() -> None:
    config = cfg.parse({**MINIMAL, "replicas": REPLICAS}).replicas
    assert config is not None and config.turn_ttl == cfg.TURN_TTL
    assert config.first.name == "spark1" and [p.name for p in config.peers] == ["spark1"]
    assert config.reached(config.me).ssh == "" and config.reached(config.first).ssh
    bad = {
        "self": "spark3",  # not in nodes
        "nodes": [{"name": "spark1", "ssh": "a"}, {"name": "spark1", "ssh": "b"}],
        "turn_ttl": "1m",  # shorter than three checks
    }
    for key, value in bad.items():
        with pytest.raises(ConfigError, match="replicas"):
            cfg.parse({**MINIMAL, "replicas": {**REPLICAS, key: value}})
    with pytest.raises(ConfigError, match=r"\[cluster\] and \[replicas\]"):
        cluster = {
            "nodes": [
                {"name": "a", "engine": ["a"]},
                {"name": "b", "ssh": "root@b", "engine": ["a"]},
            ]
        }
        cfg.parse({**MINIMAL, "cluster": cluster, "replicas": REPLICAS})


def test_gateway_is_optional_checked_and_its_key_read_when_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = {"containers": ["a"], "base_url": "http://127.0.0.1:8000"}
    assert cfg.parse({"llm": llm}).gateway is None
    gateway = cfg.parse(
        {"llm": llm, "gateway": {"url": "http://127.0.0.1:4000/v1/", "model": "qwen"}}
    ).gateway
    assert gateway is not None and gateway.url == "http://127.0.0.1:4000"  # requests add /v1
    assert gateway.timeout == 120.0 and gateway.watch is False
    monkeypatch.setenv("SPARKWARDEN_GATEWAY_API_KEY", "sk-env")
    assert gateway.api_key() == "sk-env"
    with pytest.raises(ConfigError) as bad:
        cfg.parse(
            {
                "llm": llm,
                "gateway": {"url": "litellm:4000", "api_key_file": str(tmp_path / "none")},
            }
        )
    message = str(bad.value)
    assert "gateway.url: 'litellm:4000' is not an http:// or https:// URL" in message
    assert "gateway.model: required key is missing" in message
    # Its key file is a secret like the LLM's: checked by the commands that send it, never by
    # the ones that only read state (a group member cannot read root's key).
    gone = {"url": "http://127.0.0.1:4000", "model": "qwen", "api_key_file": str(tmp_path / "x")}
    config = cfg.parse({"llm": llm, "gateway": gone})
    with pytest.raises(ConfigError, match=r"gateway\.api_key_file: .*cannot be read"):
        secrets.require_secrets(config, tmp_path / "c.toml")
    loose = _secret_file(tmp_path, 0o666)
    config = cfg.parse({"llm": llm, "gateway": {**gone, "api_key_file": str(loose)}})
    assert any(p.startswith("gateway.api_key_file: ") for p in secrets.secret_report(config)[1])


def _secret_file(tmp_path: Path, mode: int, uid: int = 0) -> Path:
    path = tmp_path / f"secret-{mode:o}-{uid}"
    path.write_text("http://127.0.0.1:9/hook")
    path.chmod(mode)
    import os

    os.chown(path, uid, 0)
    return path


def test_secrets_are_not_the_files_business_but_the_daemons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing key or unset url_env parses (status and history do not need them); the
    problems are listed for the commands that do, naming the key."""
    monkeypatch.delenv("SW_UNSET_HOOK", raising=False)
    config = cfg.parse(
        {
            "llm": {**MINIMAL["llm"], "api_key_file": "/nonexistent/key"},
            "notify": [{"url_env": "SW_UNSET_HOOK"}],
        }
    )
    problems = secrets.secret_problems(config)
    assert problems[0].startswith("llm.api_key_file: '/nonexistent/key' cannot be read")
    assert problems[1] == "notify.0.url_env: $SW_UNSET_HOOK is not set"
    with pytest.raises(ConfigError, match=r"config c\.toml: llm\.api_key_file: .*notify\.0"):
        secrets.require_secrets(config, Path("c.toml"))
    monkeypatch.setenv("SW_UNSET_HOOK", "gopher://x")
    assert (
        secrets.secret_problems(config)[1]
        == "notify.0: the URL it holds is not http:// or https://"
    )


@pytest.mark.parametrize(
    ("mode", "uid", "refused"),
    [(0o600, 0, False), (0o644, 0, False), (0o640, 1000, True), (0o666, 0, True), (0o620, 0, True)],
)
def test_a_secret_file_someone_else_can_write_is_refused_with_the_fix(
    tmp_path: Path, mode: int, uid: int, refused: bool
) -> None:
    key = _secret_file(tmp_path, mode, uid)
    config = cfg.parse(
        {"llm": {**MINIMAL["llm"], "api_key_file": str(key)}, "notify": [{"url_file": str(key)}]}
    )
    problems = secrets.secret_problems(config)
    assert len(problems) == (2 if refused else 0), problems
    for problem in problems:
        assert f"fix: chown root:root {key} && chmod 0600 {key}" in problem


def test_api_key_shape_is_checked_without_quoting_the_key() -> None:
    from sparkwarden.base.errors import scrub
    from sparkwarden.config.secretfiles import key_problem

    assert key_problem("sk-abc123\n") is None and key_problem("") is None
    for bad in ("sk-abc\n# mine\n", "sk abc", "sk-abc\tx", "sk-\x00abc", "sk-é"):
        problem = key_problem(bad)
        assert problem is not None and "abc" not in problem
    said = "LocalProtocolError: Illegal header value b'Bearer sk-abc\\n# mine'"
    assert (
        scrub(said, "sk-abc\n# mine")
        == "LocalProtocolError: Illegal header value b'Bearer [redacted]'"
    )
    assert (
        scrub("Authorization: Bearer sk-xyz and more")
        == "Authorization: Bearer [redacted] and more"
    )


def _acceptance(**given: object) -> cfg.AcceptanceConfig:
    base = {"llm": {"containers": ["vllm"], "base_url": "http://127.0.0.1:8000"}}
    return cfg.parse({**base, "acceptance": given}).acceptance


def test_a_default_never_makes_a_users_valid_choice_an_error() -> None:
    """canary_interval = "60s" alone was refused: the default canary_soon (5m) was longer."""
    alone = _acceptance(canary_interval="60s")
    assert alone.canary_interval == alone.canary_soon == 60.0
    soon = _acceptance(canary_soon="1h")  # above the default interval: that one moves up
    assert soon.canary_soon == soon.canary_interval == 3600.0
    strict = _acceptance(fraction=0.95)  # above the default recover_fraction 0.9
    assert strict.fraction == strict.recover_fraction == 0.95
    assert _acceptance().canary_soon == 300.0  # defaults in order stay as they are
    with pytest.raises(ConfigError, match="canary_soon must be at most canary_interval"):
        _acceptance(canary_interval="60s", canary_soon="5m")  # both set, against each other
    with pytest.raises(ConfigError, match="fraction must be at most recover_fraction"):
        _acceptance(fraction=0.95, recover_fraction=0.9)


def test_the_shipped_config_has_each_comment_block_once() -> None:
    """The [gateway] block was there twice."""
    text = SHIPPED.read_text()
    blocks = [b for b in text.split("\n\n") if b.strip()]
    assert [b for b in blocks if blocks.count(b) > 1] == []


def test_the_annotated_notify_example_lists_every_event() -> None:
    """Copying the example's ``events`` dropped the reboot and unreachable-node alerts."""
    import re

    from sparkwarden.base.notices import EVENTS

    text = SHIPPED.read_text()
    example = re.search(r"^# events = \[(.*?)\]", text, re.M | re.S)
    assert example is not None
    assert tuple(re.findall(r'"(\w+)"', example.group(1))) == EVENTS


def test_the_annotated_config_points_only_to_what_exists() -> None:
    """It pointed to README sections that had moved: each doc it names exists, with the
    section it quotes."""
    import re

    root = SHIPPED.parents[1]
    text = " ".join(line.lstrip("# ") for line in SHIPPED.read_text().splitlines())
    cited = re.findall(r"(docs/[\w-]+\.md)(?:, \"([^\"]+)\")?", text)
    assert cited, "no doc cited"
    for doc, section in cited:
        assert (root / doc).exists(), doc
        if section:
            assert section in (root / doc).read_text(), (doc, section)
    assert 'README "' not in text


def test_the_shipped_config_is_one_file_the_package_carries() -> None:
    """``config/sparkwarden.toml`` is a link to the packaged copy (``sparkwarden/data``, what
    ``install-service`` writes): an edit made through a tool that replaces links left two
    copies that drifted."""
    assert SHIPPED.is_symlink(), "config/sparkwarden.toml must stay a link"
    packaged = SHIPPED.parents[1] / "src" / "sparkwarden" / "data" / "sparkwarden.toml"
    assert SHIPPED.resolve() == packaged.resolve()


def test_check_config_shows_a_schedule_turned_off() -> None:
    """``cron = ""`` was dropped from "every value in force": it read as the default."""
    off = cfg.parse(
        {
            "llm": {"containers": ["x"], "base_url": "http://127.0.0.1:8000"},
            "schedule": {"cron": ""},
        }
    )
    assert cfg.effective(off)["schedule"]["cron"] == ""
    on = cfg.parse({"llm": {"containers": ["x"], "base_url": "http://127.0.0.1:8000"}})
    assert cfg.effective(on)["schedule"]["cron"] == "30 4 * * *"
    assert cfg.parse(cfg.effective(off)).schedule.cron is None  # what it prints reads back


def test_a_renamed_key_is_read_with_a_warning_naming_the_new_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 36: health.canary_interval named the health chat as the drafting canary is named;
    it is now health.chat_interval, and a config written before still works."""
    from sparkwarden.base import logs

    logs.setup("warning", force_json=True)
    old = cfg.parse({**MINIMAL, "health": {"canary_interval": "2m"}})
    assert old.health.chat_interval == 120.0
    said = capsys.readouterr()
    assert "config_key_renamed" in said.out + said.err
    assert "health.canary_interval is now health.chat_interval" in said.out + said.err
    with pytest.raises(ConfigError, match=r"old name of health\.chat_interval: keep only"):
        cfg.parse({**MINIMAL, "health": {"canary_interval": "2m", "chat_interval": "1m"}})
