"""Scenario loading, serialisation, dotted-path overrides and their errors."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import asymlink
from asymlink import Scenario, ScenarioError, examples


def test_from_file_keeps_text_origin_and_name(scenario_file: Path) -> None:
    sc = Scenario.from_file(scenario_file)
    assert sc.origin == str(scenario_file)
    assert sc.name == "tiny"
    assert sc.to_toml() == scenario_file.read_text()
    assert sc.data["links"][1]["rate"] == "8Mbit"


def test_name_falls_back_to_the_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "unnamed.toml"
    path.write_text('duration = "1s"\n')
    assert Scenario.from_file(path).name == "unnamed"
    assert Scenario.from_toml('duration = "1s"').name == "scenario"


def test_missing_file_raises_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Scenario.from_file(tmp_path / "absent.toml")


def test_invalid_toml_raises_scenario_error_naming_the_origin() -> None:
    with pytest.raises(ScenarioError) as info:
        Scenario.from_toml("rate = ", origin="x.toml")
    assert info.value.origin == "x.toml"
    assert str(info.value).startswith("x.toml: ")


def test_one_except_config_error_catches_bad_scenarios_with_key_and_line(
        scenario_file: Path, tmp_path: Path) -> None:
    text = scenario_file.read_text()
    bad_toml = tmp_path / "syntax.toml"
    bad_toml.write_text(text.replace('rate = "8Mbit"', 'rate = '))
    with pytest.raises(asymlink.ConfigError) as info:
        Scenario.from_file(bad_toml)
    assert isinstance(info.value, ScenarioError) and info.value.origin == str(bad_toml)
    assert info.value.line == text.splitlines().index('rate = "8Mbit"') + 1
    bad_value = tmp_path / "value.toml"
    bad_value.write_text(text.replace('mss = "1460B" }\napp = { kind = "bulk" }\n\n',
                                      'mss = "10B" }\napp = { kind = "bulk" }\n\n'))
    with pytest.raises(asymlink.ConfigError) as info:
        asymlink.run(bad_value)
    err = info.value
    assert isinstance(err, ScenarioError) and err.origin == str(bad_value)
    assert err.key == err.path == "flows[0].tcp.mss"
    assert err.line == bad_value.read_text().splitlines().index(
        'tcp = { profile = "rfc", mss = "10B" }') + 1
    assert str(err).startswith(f"{bad_value}: flows[0].tcp.mss: ")


def test_from_dict_round_trips_through_toml() -> None:
    data = {"name": "d", "duration": "5s", "links": [{"rate": "1Mbit"}], "flows": []}
    sc = Scenario.from_dict(data)
    assert tomllib.loads(sc.to_toml()) == data
    assert Scenario.from_toml(sc.to_toml()).data == data


def test_data_is_a_copy(scenario: Scenario) -> None:
    scenario.data["links"][1]["rate"] = "1bit"
    assert scenario.get("links.1.rate") == "8Mbit"


def test_overrides_set_nested_values_and_leave_the_original(scenario: Scenario) -> None:
    new = scenario.with_overrides(
        {"links.1.rate": "1Mbit", "duration": "10s", "flows.1.tcp.mss": "536B"}
    )
    assert new.get("links.1.rate") == "1Mbit"
    assert new.get("duration") == "10s"
    assert new.get("flows.1.tcp.mss") == "536B"
    assert new.get("flows.0.tcp.mss") == "1460B"
    assert scenario.get("links.1.rate") == "8Mbit"
    assert tomllib.loads(new.to_toml()) == new.data
    assert new.origin == scenario.origin


def test_overrides_of_written_values_keep_the_text_and_its_lines() -> None:
    from asymlink import examples

    showcase = examples.load("showcase")
    new = showcase.with_overrides({"links.1.to_a.rate": "1Mbit",
                                   "links.1.to_a.queue": {"kind": "fifo", "limit": "10p"}})
    old_lines, new_lines = showcase.to_toml().splitlines(), new.to_toml().splitlines()
    assert len(new_lines) == len(old_lines) and new_lines[0] == old_lines[0]  # comments kept
    assert ('to_a = { rate = "1Mbit", queue = { kind = "fifo", limit = "10p" } }'
            in new_lines)
    assert tomllib.loads(new.to_toml()) == new.data
    # a new key cannot be written in place: the text is re-serialised, same data
    added = showcase.with_overrides({"tcp.initial_window": 4})
    assert added.get("tcp.initial_window") == 4
    assert tomllib.loads(added.to_toml()) == added.data


def test_overrides_address_named_tables_by_name(scenario: Scenario) -> None:
    # `links.access` is the link named "access" wherever it sits in the array; the value is
    # replaced where it is written (the native span lookup resolves the name too).
    new = scenario.with_overrides({"links.access.rate": "2Mbit", "flows.up.tcp.mss": "536B"})
    assert new.get("links.1.rate") == "2Mbit"
    assert new.get("links.access.rate") == "2Mbit"
    assert new.get("flows.up.tcp.mss") == "536B"
    assert len(new.to_toml().splitlines()) == len(scenario.to_toml().splitlines())
    new.validate()


def test_override_may_add_a_key_to_an_existing_table(scenario: Scenario) -> None:
    new = scenario.with_overrides({"flows.0.tcp.initial_window": 10})
    assert new.get("flows.0.tcp.initial_window") == 10


def test_override_may_replace_a_whole_table(scenario: Scenario) -> None:
    new = scenario.with_overrides({"flows.0.tcp": {"mss": "536B"}})
    assert new.data["flows"][0]["tcp"] == {"mss": "536B"}


@pytest.mark.parametrize(
    ("path", "key", "fragment"),
    [
        ("links.2.rate", "links.2", "index out of range (the array has 2 elements)"),
        ("flows.x.tcp", "flows.x", "expected an array index or a name, got 'x'"),
        ("flows.0.tpc.mss", "flows.0.tpc", "no such key"),
        ("link.0.rate", "link", "existing keys: duration, flows, links, name, nodes, seed"),
        ("duration.unit", "duration.unit", "duration is a str ('2s'), not a table or array"),
        ("links..rate", "links..rate", "empty component"),
        ("flows.5", "flows.5", "index out of range"),
    ],
)
def test_bad_override_paths_are_named(
    scenario: Scenario, path: str, key: str, fragment: str
) -> None:
    with pytest.raises(ScenarioError) as info:
        scenario.with_overrides({path: "1"})
    assert info.value.key == key
    assert info.value.origin == "tiny.toml"
    assert fragment in info.value.msg


def test_get_of_a_missing_path_raises(scenario: Scenario) -> None:
    with pytest.raises(ScenarioError, match="no such key"):
        scenario.get("monitor.interval")


def test_validate_passes_a_parsable_scenario(scenario: Scenario) -> None:
    scenario.validate()


def test_simulation_is_built_from_the_current_text(scenario: Scenario) -> None:
    sim = scenario.with_overrides({"name": "renamed"}).simulation(seed=1)
    sim.run()
    assert sim.results()["meta"]["scenario"] == "renamed"


def test_shipped_examples_load_and_validate() -> None:
    assert "showcase" in examples.names() and "dslam" in examples.names()
    for name in examples.names():
        assert examples.describe(name)
        if name not in examples.GENERATED:   # those are checked small: test_examples_dslam
            examples.load(name).validate()


def test_unknown_example_names_the_available_ones() -> None:
    with pytest.raises(KeyError, match="showcase"):
        examples.load("no-such-example")


_keys = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)
_leaves = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=8), st.booleans())


@given(st.dictionaries(_keys, st.dictionaries(_keys, _leaves, max_size=4), max_size=4),
       _leaves)
def test_override_then_get_returns_the_value(data: dict[str, Any], value: Any) -> None:
    sc = Scenario.from_dict(data)
    for table, inner in data.items():
        for key in inner:
            path = f"{table}.{key}"
            assert sc.with_overrides({path: value}).get(path) == value
