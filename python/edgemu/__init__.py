"""edgemu from Python: Gymnasium environments over the emulator's Rust cores
and the server side of its external-policy protocol.

See docs/python.md in the repository.
"""

from . import _core

__version__ = _core.__version__
