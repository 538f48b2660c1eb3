"""`build_child_env` and `looks_secret`, pure: the layers, their order, and what never passes."""

from __future__ import annotations

import pytest

from tether.parent.process.env import ALLOWLIST, build_child_env, looks_secret

BASE = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/me",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "TERM": "xterm",
    "USER": "me",
    "EDITOR": "vi",
    "OPENAI_API_KEY": "sk-canary",
    "AWS_SECRET_ACCESS_KEY": "aws-canary",
    "GITHUB_TOKEN": "ghp-canary",
    "MYAPP_MODE": "fast",
    "MYAPP_TOKEN": "myapp-canary",
    "LC_AUTH_TOKEN": "lc-canary",
    "BASH_FUNC_greet%%": "() { echo hi; }",
}


def test_only_the_allowlist_and_lc_variables_pass_by_default() -> None:
    env = build_child_env(BASE)

    assert env == {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/me",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "TERM": "xterm",
        "USER": "me",
    }


def test_a_secret_looking_lc_variable_does_not_ride_in_on_the_prefix() -> None:
    assert "LC_AUTH_TOKEN" not in build_child_env(BASE)


def test_a_glob_passes_matching_names_but_never_a_secret() -> None:
    env = build_child_env(BASE, pass_through=["MYAPP_*", "*_KEY", "*"])

    assert env["MYAPP_MODE"] == "fast"
    assert env["EDITOR"] == "vi"
    for secret in ("MYAPP_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"):
        assert secret not in env


def test_a_secret_passes_when_named_exactly_and_only_that_one() -> None:
    env = build_child_env(BASE, pass_through=["GITHUB_TOKEN"])

    assert env["GITHUB_TOKEN"] == "ghp-canary"
    assert "OPENAI_API_KEY" not in env
    assert "MYAPP_TOKEN" not in env


def test_a_name_that_is_not_set_in_the_parent_is_simply_absent() -> None:
    assert "NOT_SET_ANYWHERE" not in build_child_env(BASE, pass_through=["NOT_SET_ANYWHERE"])


def test_inherited_values_that_start_with_parens_are_dropped_even_when_named() -> None:
    base = dict(BASE, TERM="() { :; }; echo pwned")

    env = build_child_env(base, pass_through=["BASH_FUNC_greet%%", "TERM"])

    assert "BASH_FUNC_greet%%" not in env
    assert "TERM" not in env


def test_explicit_values_are_merged_over_without_replacing_the_rest() -> None:
    env = build_child_env(BASE, explicit={"LANG": "en_GB.UTF-8", "MY_SETTING": "on"})

    assert env["LANG"] == "en_GB.UTF-8"
    assert env["MY_SETTING"] == "on"
    assert env["PATH"] == "/usr/bin:/bin"
    assert env["HOME"] == "/home/me"


def test_explicit_values_are_kept_as_written_even_secret_looking_ones() -> None:
    # The caller wrote them down: that is the explicit way to hand a child a credential.
    env = build_child_env(BASE, explicit={"SERVICE_TOKEN": "given", "FN": "() { :; }"})

    assert env["SERVICE_TOKEN"] == "given"
    assert env["FN"] == "() { :; }"


def test_the_parents_environment_is_not_modified() -> None:
    base = dict(BASE)
    build_child_env(base, pass_through=["*"], explicit={"PATH": "/x"})
    assert base == BASE


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
        "github_token",
        "DATABASE_PASSWORD",
        "PGPASSWD",
        "GPG_PASSPHRASE",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "HTTP_AUTH",
        "SESSION_COOKIE",
        "SSH_PRIVATE_KEY_FILE",
        "GH_PAT",
        "PAT_ADMIN",
        "SENTRY_DSN",
        "DB_CONNECTION_STRING",
        "REDIS_CONNSTR",
    ],
)
def test_secret_looking_names(name: str) -> None:
    assert looks_secret(name)


@pytest.mark.parametrize("name", [*sorted(ALLOWLIST), "LC_ALL", "EDITOR", "PYTHONPATH"])
def test_ordinary_names_do_not_look_secret(name: str) -> None:
    assert not looks_secret(name)
