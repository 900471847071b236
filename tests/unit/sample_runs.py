"""A small run record shared by the unit tests of records and charts."""

from labkit import records


def make_run(name="plain", started="2026-11-21T10:00:00+00:00", tps=100.0, notebook="02-flash-sale"):
    return records.Run(
        name=name, notebook=notebook, profile="ci", started_at=started, clients=8, tps=tps,
        per_second=[{"t": 1.0, "tps": 100.0, "lat_ms": 1.0}, {"t": 2.0, "tps": 0.0, "lat_ms": None},
                    {"t": 3.0, "tps": 120.0, "lat_ms": 1.1}],
        stalls=[{"start": 1.0, "end": 2.0}], extra={"goodput": 42.0},
        probes={"waits": [{"t": 0.5, "wait": "CPU", "backends": 3}, {"t": 1.5, "wait": "Lock: tuple", "backends": 7}]},
    )
