"""An object's in-memory state as values ``torch.load(weights_only=True)`` reads back, and the way back.

The engine saves every model's full training state at each epoch end (``dpaudit.train``) so that an
interrupted run resumes where it stopped and ends bit-identical to an uninterrupted one. The state of an
optimizer, a canary recorder or a diagnostics recorder is its instance attributes: tensors, numbers,
strings, lists and dicts of them, numpy arrays and random generators. ``capture`` encodes them (a
numpy Generator as its bit generator's state, a torch Generator as its state tensor, a plain object
attribute-wise); ``restore`` writes them back. Tensors and generators the object already holds are
updated in place, so references kept elsewhere (the optimizer's parameter list, an ensemble's stacked
parameters) stay valid. A class lists attributes that are not state — references to shared objects,
caches rebuilt on demand — in ``transient_state``. An attribute of any other type is an error, so a new
optimizer with unsupported state fails the resume tests instead of resuming wrongly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_ARRAY, _NUMPY_RNG, _TORCH_RNG, _OBJECT = "__ndarray__", "__numpy_generator__", "__torch_generator__", "__object__"
_MISSING = object()


def capture(obj: Any) -> dict[str, Any]:
    """The instance attributes of ``obj`` (except its class's ``transient_state``), encoded."""
    skip = set(getattr(type(obj), "transient_state", ()))
    return {
        name: _encode(value, f"{type(obj).__name__}.{name}") for name, value in vars(obj).items() if name not in skip
    }


def restore(obj: Any, state: dict[str, Any]) -> Any:
    """Put a ``capture`` of an object of the same class back into ``obj``; returns ``obj``."""
    for name, encoded in state.items():
        setattr(obj, name, decode(encoded, getattr(obj, name, _MISSING)))
    return obj


def encode(value: Any) -> Any:
    """One value (tensor, number, list, dict, numpy array, random generator, plain object), encoded."""
    return _encode(value, type(value).__name__)


def _encode(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor):  # a copy: torch.save writes a view's whole storage (an ensemble's stack)
        return value.detach().clone()
    if isinstance(value, (np.ndarray, np.generic)):
        return {_ARRAY: torch.from_numpy(np.array(value, copy=True)), "scalar": isinstance(value, np.generic)}
    if isinstance(value, np.random.Generator):
        return {_NUMPY_RNG: value.bit_generator.state}
    if isinstance(value, torch.Generator):
        return {_TORCH_RNG: value.get_state()}
    if isinstance(value, list):
        return [_encode(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: _encode(item, f"{where}[{key!r}]") for key, item in value.items()}
    if hasattr(value, "__dict__") and type(value).__module__.startswith("dpaudit."):
        return {_OBJECT: capture(value)}
    raise TypeError(
        f"{where}: cannot save training state of type {type(value).__name__}; "
        "list it in transient_state if it is not state"
    )


def decode(encoded: Any, current: Any = _MISSING) -> Any:
    """The value ``encoded`` stands for; tensors, generators and objects of ``current`` are updated in place."""
    if isinstance(encoded, torch.Tensor):
        if (
            isinstance(current, torch.Tensor)
            and current.shape == encoded.shape
            and current.dtype == encoded.dtype
            and current.device == encoded.device
        ):
            return current.copy_(encoded)
        return encoded
    if isinstance(encoded, list):
        same = isinstance(current, list) and len(current) == len(encoded)
        return [decode(item, current[index] if same else _MISSING) for index, item in enumerate(encoded)]
    if not isinstance(encoded, dict):
        return encoded
    if _ARRAY in encoded:
        array = encoded[_ARRAY].numpy()
        return array[()] if encoded["scalar"] else array
    if _NUMPY_RNG in encoded:
        generator = current if isinstance(current, np.random.Generator) else np.random.default_rng()
        generator.bit_generator.state = encoded[_NUMPY_RNG]
        return generator
    if _TORCH_RNG in encoded:
        if not isinstance(current, torch.Generator):
            raise TypeError("a torch Generator is restored into an existing one only")
        current.set_state(encoded[_TORCH_RNG])
        return current
    if _OBJECT in encoded:
        if current is _MISSING or current is None:
            raise TypeError("an object is restored into an existing one only")
        return restore(current, encoded[_OBJECT])
    return {
        key: decode(item, current.get(key, _MISSING) if isinstance(current, dict) else _MISSING)
        for key, item in encoded.items()
    }
