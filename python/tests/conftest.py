import os
import sys

import pytest

# The repository root (examples, scripts) from python/tests/.
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture
def root():
    return ROOT


@pytest.fixture
def python():
    return sys.executable
