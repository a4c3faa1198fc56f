"""DS2 and Justin as pure functions: no kopf, kubernetes, Prometheus or network imports.

`evaluate` is the one entry point the controller and the simulator call; `ds2`,
`justin` and `limits` are its steps, usable alone.
"""

from policies import ds2, justin, limits
from policies.evaluate import evaluate
from policies.params import HISTORY_LIMIT, Evaluation, PolicyState, ScalingParams, totals

__all__ = [
    "HISTORY_LIMIT",
    "Evaluation",
    "PolicyState",
    "ScalingParams",
    "ds2",
    "evaluate",
    "justin",
    "limits",
    "totals",
]
