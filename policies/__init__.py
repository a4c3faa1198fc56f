"""The scaling core as pure functions: no kopf, kubernetes, Prometheus or network imports.

Three policies (`spec.policy`): capacity (the default: a learned capacity surface per
vertex, `capacity` and `learning`), DS2 (`ds2`) and Justin (`justin`, DS2 then
Algorithm 1). `evaluate` is the one entry point, called by the controller's decide stage
(`controller/decide.py`), which `hybrid-scaler simulate` runs too: it runs the chosen
policy, then `limits`, and reports skew (`skew`) for every policy; restarts are priced
here too (`restart_cost`, `params.ScalingParams.restart_downtime_s`).
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
