"""A LABKIT_DSN reaches pgbench through libpq's environment variables: every parameter that has one."""

import psycopg.conninfo
import psycopg.pq
import pytest

from labkit.backend import libpq_environment
from labkit.errors import UsageError

# Those a reviewer found missing: each passed labkit.start() and failed at the first pgbench run.
ONCE_MISSING = ("service", "sslcrl", "sslcrldir", "require_auth", "sslcertmode", "load_balance_hosts",
                "client_encoding", "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname", "gsslib",
                "requirepeer", "gssdelegation")


def libpq_options():
    return [(option.keyword.decode(), option.envvar.decode() if option.envvar else None)
            for option in psycopg.pq.Conninfo.get_defaults()]


def test_the_reviewers_parameters_are_carried():
    environment = libpq_environment("host=h " + " ".join(f"{name}=v{index}" for index, name in enumerate(ONCE_MISSING)))
    assert len(environment) == len(ONCE_MISSING) + 1


def test_every_parameter_with_an_environment_variable_is_carried_where_libpq_reads_it(monkeypatch):
    """libpq itself reads the environment labkit makes back into the same parameters."""
    carried = {name: f"value-{index}" for index, (name, variable) in enumerate(libpq_options()) if variable}
    for variable in filter(None, (variable for _, variable in libpq_options())):
        monkeypatch.delenv(variable, raising=False)
    dsn = psycopg.conninfo.make_conninfo("", **carried)
    for variable, value in libpq_environment(dsn).items():
        monkeypatch.setenv(variable, value)
    read_back = {option.keyword.decode(): option.val.decode() for option in psycopg.pq.Conninfo.get_defaults()
                 if option.keyword.decode() in carried and option.val is not None}
    assert read_back == carried


@pytest.mark.parametrize("name", ["keepalives", "sslpassword", "tcp_user_timeout"])
def test_a_parameter_libpq_reads_from_no_variable_is_refused_with_what_to_do(name):
    with pytest.raises(UsageError, match=f"{name}.*leave (it|them) out of LABKIT_DSN"):
        libpq_environment(f"host=h {name}=1")
