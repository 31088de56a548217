"""The JVM room's pure parts: a JVM command line (where the environment's flags go),
Maven coordinates, and the line a failed Maven run is reduced to."""

from __future__ import annotations

import os

import pytest

from tokensvc.jvm import Artifact, JavaCommand, classpath, env_flags
from tokensvc.jvm.jars import _first_error, _pom

ENV = "TEST_JVMFLAGS"


def test_unset_or_blank_environment_gives_no_flags() -> None:
    assert env_flags(ENV, {}) == []
    assert env_flags(ENV, {ENV: "  "}) == []


def test_environment_flags_are_split_as_a_shell_would() -> None:
    assert env_flags(ENV, {ENV: "-Xmx1g '-Dx=a b'"}) == ["-Xmx1g", "-Dx=a b"]


def test_command_order_is_heap_own_flags_properties_environment_classpath_main_args() -> None:
    command = JavaCommand(
        java="/j/bin/java", main="a.Main", classpath=["/x.jar", "/y.jar"], args=["cfg"],
        heap_mb=64, flags=["-XX:+UseSerialGC"], system_properties={"k": "v"},
        flags_env=ENV, prefix=["ip", "netns", "exec", "n1"],
    )
    assert command.argv({ENV: "-Xmx128m"}) == [
        "ip", "netns", "exec", "n1", "/j/bin/java", "-Xmx64m", "-XX:+UseSerialGC", "-Dk=v",
        "-Xmx128m", "-cp", f"/x.jar{os.pathsep}/y.jar", "a.Main", "cfg",
    ]
    assert "-Xmx128m" not in command.argv({})


def test_a_command_without_heap_or_environment_variable_has_neither() -> None:
    assert JavaCommand(java="java", main="M", classpath=["c"]).argv({ENV: "-Xmx1g"}) == [
        "java", "-cp", "c", "M"]


def test_classpath_joins_with_the_platform_separator() -> None:
    assert classpath(["a.jar", "b"]) == f"a.jar{os.pathsep}b"


def test_coordinates_parse_and_print() -> None:
    artifact = Artifact.parse("org.apache.kafka:kafka_2.13:3.9.1")
    assert artifact == Artifact("org.apache.kafka", "kafka_2.13", "3.9.1")
    assert str(artifact) == "org.apache.kafka:kafka_2.13:3.9.1"


@pytest.mark.parametrize("text", ["kafka", "a:b", "a:b:c:d", "a:b:<x>", "a::1"])
def test_malformed_coordinates_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="group:artifact:version"):
        Artifact.parse(text)


def test_the_pom_names_each_artifact_as_a_dependency() -> None:
    pom = _pom(["g.one:a-1:1.0", "g.two:a_2:2.0"])
    assert "<groupId>g.one</groupId><artifactId>a-1</artifactId><version>1.0</version>" in pom
    assert "<groupId>g.two</groupId><artifactId>a_2</artifactId><version>2.0</version>" in pom


def test_a_failed_maven_run_is_its_first_error_line() -> None:
    output = "[INFO] x\n[ERROR] Failed to execute goal: could not resolve g:a:1\n[ERROR] more\n"
    assert _first_error(output) == "Failed to execute goal: could not resolve g:a:1"
    assert _first_error("last words\n") == "last words"
    assert _first_error("") == "no output"
