import pytest
from actuators._children import Children


@pytest.fixture
def children():
    """Real child processes for a test; every one is resumed and killed at teardown."""
    c = Children()
    try:
        yield c
    finally:
        c.cleanup()
