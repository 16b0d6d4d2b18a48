"""The Gymnasium environments (registered on `import edgemu`):

- `edgemu/KvRepair-v0` (`KvRepairEnv`): one step = one repair decision of a
  PriorityFEC KV-cache handoff.
- `edgemu/LyreoScheduling-v0` (`LyreoSchedulingEnv`): one step = one LYREO
  slot, every request of the slot assigned at once.

Both are the Rust harnesses' steppers (`edgemu._core`); see docs/python.md.
"""

from .lyreo import LyreoSchedulingEnv
from .repair import KvRepairEnv, evaluate_repair

__all__ = ["KvRepairEnv", "LyreoSchedulingEnv", "evaluate_repair"]
