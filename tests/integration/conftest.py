import pytest

import labkit

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def lab():
    lab = labkit.start("tests", fresh=True)
    yield lab
    lab.close()


@pytest.fixture
def hot_row(lab):
    lab.sql("drop table if exists hot; create table hot (id int primary key, n int); insert into hot values (1, 0)")
    return "hot"
