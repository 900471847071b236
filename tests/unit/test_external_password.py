"""LABKIT_PASSWORD_FILE: the password of LABKIT_DSN's server read from a file (docker/compose.yaml)."""

import psycopg.conninfo
import pytest

from labkit.errors import UsageError
from labkit.external import from_environment


def parameters(server) -> dict:
    return psycopg.conninfo.conninfo_to_dict(server.conninfo("lab_x"))


def test_the_first_line_of_the_file_is_the_password(monkeypatch, tmp_path):
    secret = tmp_path / "pass wörd"  # a path with a space and a non-ASCII letter
    secret.write_text("it's a 'secret' \\ with spaces\nnot this\n", encoding="utf-8")
    monkeypatch.setenv("LABKIT_DSN", "host=postgres port=5432 user=postgres dbname=postgres")
    monkeypatch.setenv("LABKIT_PASSWORD_FILE", str(secret))
    server = from_environment()
    assert parameters(server) == {"host": "postgres", "port": "5432", "user": "postgres", "dbname": "lab_x",
                                  "password": "it's a 'secret' \\ with spaces"}
    assert "secret" not in server.where()


def test_without_the_variable_the_dsn_is_used_as_it_is(monkeypatch):
    monkeypatch.setenv("LABKIT_DSN", "host=postgres user=postgres password=given")
    monkeypatch.delenv("LABKIT_PASSWORD_FILE", raising=False)
    assert parameters(from_environment())["password"] == "given"


@pytest.mark.parametrize("content, said", [(None, "cannot be read"), ("", "first line is empty"),
                                           ("\nsecond", "first line is empty")])
def test_a_missing_or_empty_file_is_said_with_what_to_do(monkeypatch, tmp_path, content, said):
    secret = tmp_path / "password"
    if content is not None:
        secret.write_text(content, encoding="utf-8")
    monkeypatch.setenv("LABKIT_DSN", "host=postgres user=postgres")
    monkeypatch.setenv("LABKIT_PASSWORD_FILE", str(secret))
    with pytest.raises(UsageError, match=said) as raised:
        from_environment()
    assert str(secret) in str(raised.value) and len(str(raised.value)) < 300
