"""PyTorch DDP through p4ina: a communication hook that all-reduces every gradient bucket with a p4ina worker.

    from torchddp import HookState, register
    register(ddp_model, HookState(worker, "inc-int8", rank, world_size))

torchddp.hook has the hook; torchddp.models two real models on data every machine has; torchddp.train one
rank of the training experiment (`python -m torchddp rank`). Needs PyTorch (`pip install 'p4ina[torch]'`).
"""

from torchddp.hook import HookError, HookState, check_model, p4ina_hook, register

__all__ = ["HookError", "HookState", "check_model", "p4ina_hook", "register"]
