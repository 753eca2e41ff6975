"""The names of the built-in optimizers, models and black-box canaries, importable without torch (the CLI's
choices).

The registries themselves (:mod:`dpaudit.optim`, :mod:`dpaudit.models`) load torch. Once one is loaded, its function
here returns the registry's names, those a user registered included; before that, the built-in ones listed here
(``tests/cli/test_cli_parser.py`` checks the lists against the registries).
"""

from __future__ import annotations

import sys

BUILTIN_OPTIMIZERS = (
    "adadpigu",
    "adadpigu-code",
    "adadpigu-freeze",
    "auto-s",
    "auto-v",
    "d2p-sgd",
    "d2p2-sgd",
    "d2p2-sgd-as-published",
    "dp-psac",
    "dp-psac-batch-noise",
    "dp2-sgd",
    "dp2-sgd-as-published",
    "dpsgd-auto",
    "dpsgd-dc",
    "dpsgd-gc",
    "dpsgd-gc-reused-noise",
    "dpsgd-gc-skipped-noise",
    "dpsgd-gc-understated-q",
    "dpsgd-no-clip",
    "dpsgd-no-noise",
    "nsgd",
    "on-rand",
    "on-topk",
    "sgd",
    "tp-rand",
    "tp-topk",
    "tp-topk-clean-support",
)
#: The black-box audit's input-space canaries and initialisations (``dpaudit.blackbox``, ``dpaudit blackbox``).
CANARY_KINDS = ("mislabelled", "blank", "bright", "gradient-aligned")
INITIALISATIONS = ("natural", "worst-case")
BUILTIN_MODELS = ("cnn", "cnn-d2p2", "cnn-digits", "cnn-small", "linear", "mlp", "resnet18-gn", "resnet18-gn-cifar")


def optimizer_names() -> list[str]:
    """The optimizers' names: the registry's once :mod:`dpaudit.optim` is loaded, else the built-in ones."""
    available = getattr(sys.modules.get("dpaudit.optim"), "available", None)
    return available() if available is not None else sorted(BUILTIN_OPTIMIZERS)


def model_names() -> list[str]:
    """The models' names: the registry's once :mod:`dpaudit.models` is loaded, else the built-in ones."""
    available = getattr(sys.modules.get("dpaudit.models"), "available", None)
    return available() if available is not None else sorted(BUILTIN_MODELS)
