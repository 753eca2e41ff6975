"""The membership-inference data split of the DPSGD-GC/DC paper (its App. D.2), as a reusable seeded function.

The target model trains on ``target_size`` train-split images (its members); the same number of
test-split images are its non-members. Shadow models draw their own members and non-members from the
train-split images the target does not use, so the target's data never overlaps a shadow's; shadows may
overlap one another. Every trial re-draws the shadows from ``numpy.random.default_rng([seed, trial])``:
the same ``(seed, trial)`` always gives the same split.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit._io import read_json, write_json
from dpaudit._validation import DPAuditError, check_choice, check_positive_int

__all__ = [
    "HalvesSplit",
    "MIASplit",
    "ShadowSplit",
    "load_split",
    "make_halves_split",
    "make_mia_split",
    "SPLIT_DESIGNS",
    "TARGET_MEMBER_CHOICES",
]

#: ``TrainConfig.split_design`` values: the DPSGD-GC/DC paper's disjoint shadows, or LiRA's paired halves of one pool.
SPLIT_DESIGNS = ("disjoint", "halves")

TARGET_MEMBER_CHOICES = ("first", "random")
_FORMAT = "dpaudit.mia_split/1"
_HALVES_FORMAT = "dpaudit.halves_split/1"


def _as_index_array(name: str, values: Any) -> np.ndarray:
    """``values`` as a read-only 1-D int64 array of non-negative integers."""
    if isinstance(values, np.ndarray):
        array = values
    else:
        items = list(values)
        if any(isinstance(item, bool) or not isinstance(item, (int, np.integer)) for item in items):
            bad = next(item for item in items if isinstance(item, bool) or not isinstance(item, (int, np.integer)))
            raise DPAuditError(f"{name} must hold integers, got {bad!r}")
        array = np.asarray(items, dtype=np.int64)
    if array.size == 0:
        array = array.astype(np.int64)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_:
        raise DPAuditError(f"{name} must be a 1-D array of integers, got shape {array.shape} dtype {array.dtype}")
    if array.size and array.min() < 0:
        raise DPAuditError(f"{name} must hold non-negative indices, got {array.min()}")
    array = np.array(array, dtype=np.int64, copy=True)
    array.setflags(write=False)
    return array


def _check_unique(name: str, array: np.ndarray) -> None:
    if len(np.unique(array)) != len(array):
        values, counts = np.unique(array, return_counts=True)
        raise DPAuditError(f"{name} must not repeat an index, got {values[counts > 1][0]} more than once")


def _check_disjoint(name_a: str, a: np.ndarray, name_b: str, b: np.ndarray) -> None:
    common = np.intersect1d(a, b)
    if len(common):
        raise DPAuditError(
            f"{name_a} and {name_b} must be disjoint, got {len(common)} shared index(es), e.g. {common[0]}"
        )


def _check_identity(split: MIASplit | HalvesSplit) -> None:
    """Validate a split's dataset name, trial and seed (normalising the integers in place)."""
    if not isinstance(split.dataset, str) or not split.dataset:
        raise DPAuditError(f"dataset must be a non-empty string, got {split.dataset!r}")
    object.__setattr__(split, "trial", check_positive_int("trial", split.trial, allow_zero=True))
    object.__setattr__(split, "seed", check_positive_int("seed", split.seed, allow_zero=True))


def _read_payload(path: str | os.PathLike, kind: str) -> Any:
    try:
        return read_json(path)
    except FileNotFoundError:  # a garbled file is read_json's one-line error
        raise DPAuditError(f"{kind} file not found: {path}") from None


@dataclass(frozen=True, eq=False)
class ShadowSplit:
    """One shadow model's data: indices into the TRAIN split.

    Attributes:
        members: Indices the shadow model trains on.
        nonmembers: Indices held out from the shadow model (disjoint from ``members``).
    """

    members: np.ndarray
    nonmembers: np.ndarray

    def __post_init__(self) -> None:
        members = _as_index_array("shadow members", self.members)
        nonmembers = _as_index_array("shadow nonmembers", self.nonmembers)
        _check_unique("shadow members", members)
        _check_unique("shadow nonmembers", nonmembers)
        _check_disjoint("shadow members", members, "shadow nonmembers", nonmembers)
        object.__setattr__(self, "members", members)
        object.__setattr__(self, "nonmembers", nonmembers)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShadowSplit):
            return NotImplemented
        return np.array_equal(self.members, other.members) and np.array_equal(self.nonmembers, other.nonmembers)

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, list[int]]:
        return {"members": self.members.tolist(), "nonmembers": self.nonmembers.tolist()}


@dataclass(frozen=True, eq=False)
class MIASplit:
    """The data of one membership-inference trial.

    Attributes:
        dataset: Dataset name the indices refer to.
        trial: Monte Carlo trial number.
        seed: Base seed; the split was drawn from ``numpy.random.default_rng([seed, trial])``.
        target_members: TRAIN-split indices the target model trains on.
        target_nonmembers: TEST-split indices used as the target's non-members.
        shadows: One :class:`ShadowSplit` per shadow model (TRAIN-split indices, disjoint from
            ``target_members``).
    """

    dataset: str
    trial: int
    seed: int
    target_members: np.ndarray
    target_nonmembers: np.ndarray
    shadows: tuple[ShadowSplit, ...] = ()

    def __post_init__(self) -> None:
        _check_identity(self)
        members = _as_index_array("target members", self.target_members)
        nonmembers = _as_index_array("target nonmembers", self.target_nonmembers)
        _check_unique("target members", members)
        _check_unique("target nonmembers", nonmembers)
        object.__setattr__(self, "target_members", members)
        object.__setattr__(self, "target_nonmembers", nonmembers)
        shadows = tuple(self.shadows)
        for number, shadow in enumerate(shadows):
            if not isinstance(shadow, ShadowSplit):
                raise DPAuditError(f"shadow {number} must be a ShadowSplit, got {type(shadow).__name__}")
            _check_disjoint("target members", members, f"shadow {number} members", shadow.members)
            _check_disjoint("target members", members, f"shadow {number} nonmembers", shadow.nonmembers)
        object.__setattr__(self, "shadows", shadows)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MIASplit):
            return NotImplemented
        return (
            (self.dataset, self.trial, self.seed) == (other.dataset, other.trial, other.seed)
            and np.array_equal(self.target_members, other.target_members)
            and np.array_equal(self.target_nonmembers, other.target_nonmembers)
            and self.shadows == other.shadows
        )

    __hash__ = None  # type: ignore[assignment]

    #: The dataset split the target's non-members come from.
    nonmember_source = "test"

    @property
    def num_shadows(self) -> int:
        return len(self.shadows)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form: metadata plus index lists."""
        return {
            "format": _FORMAT,
            "dataset": self.dataset,
            "trial": self.trial,
            "seed": self.seed,
            "target_members": self.target_members.tolist(),
            "target_nonmembers": self.target_nonmembers.tolist(),
            "shadows": [shadow.to_dict() for shadow in self.shadows],
        }

    @classmethod
    def from_dict(cls, payload: Any, *, source: str = "MIA split") -> MIASplit:
        """Rebuild a split from :meth:`to_dict` output, validating it."""
        if not isinstance(payload, dict):
            raise DPAuditError(f"{source}: expected a JSON object, got {type(payload).__name__}")
        required = ("dataset", "trial", "seed", "target_members", "target_nonmembers", "shadows")
        missing = [key for key in required if key not in payload]
        if missing:
            raise DPAuditError(f"{source}: missing field(s) {', '.join(missing)}")
        if payload.get("format", _FORMAT) != _FORMAT:
            raise DPAuditError(f"{source}: expected format {_FORMAT!r}, got {payload['format']!r}")
        if not isinstance(payload["shadows"], list):
            raise DPAuditError(f"{source}: expected 'shadows' to be a list, got {type(payload['shadows']).__name__}")
        try:
            shadows = []
            for number, shadow in enumerate(payload["shadows"]):
                if not isinstance(shadow, dict) or "members" not in shadow or "nonmembers" not in shadow:
                    raise DPAuditError(f"shadow {number} must be an object with 'members' and 'nonmembers'")
                shadows.append(
                    ShadowSplit(
                        _as_index_array(f"shadow {number} members", shadow["members"]),
                        _as_index_array(f"shadow {number} nonmembers", shadow["nonmembers"]),
                    )
                )
            return cls(
                dataset=payload["dataset"],
                trial=payload["trial"],
                seed=payload["seed"],
                target_members=_as_index_array("target members", payload["target_members"]),
                target_nonmembers=_as_index_array("target nonmembers", payload["target_nonmembers"]),
                shadows=tuple(shadows),
            )
        except DPAuditError as error:
            raise DPAuditError(f"{source}: {error}") from None
        except TypeError as error:  # e.g. an index list that is not a list
            raise DPAuditError(f"{source}: {' '.join(str(error).split())}") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the split to ``path`` as JSON, atomically."""
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> MIASplit:
        """Read a split written by :meth:`save`, checking indices and disjointness."""
        return cls.from_dict(_read_payload(path, "MIA split"), source=str(path))


def make_mia_split(
    *,
    dataset: str,
    train_size: int,
    test_size: int,
    target_size: int,
    num_shadows: int,
    trial: int = 0,
    seed: int = 0,
    shadow_size: int | None = None,
    target_members: str = "first",
) -> MIASplit:
    """Draw the DPSGD-GC/DC paper's split (App. D.2; members as in its code) for one trial.

    - Target members: train indices ``[0, target_size)`` (``"first"``, as the paper's code does) or a
      sorted draw of ``target_size`` train indices without replacement (``"random"``; then the target
      members change with the trial too).
    - Target non-members: test indices ``[0, target_size)``.
    - Shadow pool: the train indices the target does not use.
    - Each shadow draws ``2 * shadow_size`` indices from the pool without replacement: the first half are
      its members, the second half its non-members. Shadows may overlap one another.

    Everything random comes from ``numpy.random.default_rng([seed, trial])``: each trial re-draws the
    shadows, and the same ``(seed, trial)`` gives the identical split.

    Args:
        dataset: Name of the dataset the indices refer to (metadata).
        train_size: Size of the dataset's train split.
        test_size: Size of the dataset's test split.
        target_size: Number of target members (and of target non-members).
        num_shadows: Number of shadow models (0 allowed).
        trial: Monte Carlo trial number (≥ 0).
        seed: Base seed (≥ 0).
        shadow_size: Members (and non-members) per shadow; defaults to ``target_size``.
        target_members: ``"first"`` or ``"random"``.

    Raises:
        DPAuditError: On sizes that cannot be satisfied, before anything is drawn.
    """
    if not isinstance(dataset, str) or not dataset:
        raise DPAuditError(f"dataset must be a non-empty string, got {dataset!r}")
    train_size = check_positive_int("train_size", train_size)
    test_size = check_positive_int("test_size", test_size)
    target_size = check_positive_int("target_size", target_size)
    num_shadows = check_positive_int("num_shadows", num_shadows, allow_zero=True)
    trial = check_positive_int("trial", trial, allow_zero=True)
    seed = check_positive_int("seed", seed, allow_zero=True)
    shadow_size = target_size if shadow_size is None else check_positive_int("shadow_size", shadow_size)
    check_choice("target_members", target_members, TARGET_MEMBER_CHOICES)
    if target_size > train_size:
        raise DPAuditError(f"target_size ({target_size}) exceeds the train split ({train_size} images)")
    if target_size > test_size:
        raise DPAuditError(
            f"target_size ({target_size}) exceeds the test split ({test_size} images) "
            "that supplies the target non-members"
        )
    pool_size = train_size - target_size
    if num_shadows and 2 * shadow_size > pool_size:
        raise DPAuditError(
            f"each shadow needs 2·shadow_size = {2 * shadow_size} train images but the shadow pool "
            f"(train_size − target_size) holds only {pool_size}"
        )

    rng = np.random.default_rng([seed, trial])
    if target_members == "first":
        members = np.arange(target_size, dtype=np.int64)
    else:
        members = np.sort(rng.choice(train_size, size=target_size, replace=False)).astype(np.int64)
    pool = np.setdiff1d(np.arange(train_size, dtype=np.int64), members, assume_unique=True)
    shadows = []
    for _ in range(num_shadows):
        drawn = rng.choice(pool, size=2 * shadow_size, replace=False)
        shadows.append(ShadowSplit(drawn[:shadow_size], drawn[shadow_size:]))
    return MIASplit(
        dataset=dataset,
        trial=trial,
        seed=seed,
        target_members=members,
        target_nonmembers=np.arange(target_size, dtype=np.int64),
        shadows=tuple(shadows),
    )


@dataclass(frozen=True, eq=False)
class HalvesSplit:
    """LiRA's design (Carlini et al. 2022): every model trains on one half of a shared pool of TRAIN records.

    Model 0, the target, trains on a random half; its non-members are the rest of the pool, drawn from
    the same distribution as its members. The shadows come in complementary pairs (shadow 2j on a random
    half, shadow 2j+1 on the other half), so every record is a member of exactly half the shadows, and
    every shadow's membership is independent of the target's. (Pairing the target with a shadow would
    make that shadow's membership the opposite of the target's on every record, and its model-wide
    quirks would then separate members from non-members by themselves.)

    Attributes:
        dataset: Dataset name the indices refer to.
        trial: Monte Carlo trial number.
        seed: Base seed; the split was drawn from ``numpy.random.default_rng([seed, trial, 2])``.
        pool: TRAIN-split indices shared by all models (even length).
        keep: ``[1 + shadows, len(pool)]`` booleans, True where a model trains on a pool record.
    """

    dataset: str
    trial: int
    seed: int
    pool: np.ndarray
    keep: np.ndarray

    nonmember_source = "train"

    def __post_init__(self) -> None:
        _check_identity(self)
        pool = _as_index_array("pool", self.pool)
        _check_unique("pool", pool)
        keep = np.array(self.keep, dtype=bool, copy=True)
        if keep.ndim != 2 or keep.shape[1] != pool.size or keep.shape[0] < 3 or keep.shape[0] % 2 == 0:
            raise DPAuditError(
                f"keep must be [1 + an even number ≥ 2 of shadows, {pool.size} pool records], got {keep.shape}"
            )
        if not (keep.sum(axis=1) * 2 == pool.size).all() or not (keep[1:].sum(axis=0) * 2 == keep.shape[0] - 1).all():
            raise DPAuditError("keep must give every model half the pool and every record to half the shadows")
        keep.setflags(write=False)
        object.__setattr__(self, "pool", pool)
        object.__setattr__(self, "keep", keep)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HalvesSplit):
            return NotImplemented
        return (
            (self.dataset, self.trial, self.seed) == (other.dataset, other.trial, other.seed)
            and np.array_equal(self.pool, other.pool)
            and np.array_equal(self.keep, other.keep)
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def target_members(self) -> np.ndarray:
        return self.pool[self.keep[0]]

    @property
    def target_nonmembers(self) -> np.ndarray:
        """TRAIN-split indices (``nonmember_source``) of the pool records the target does not train on."""
        return self.pool[~self.keep[0]]

    @property
    def shadows(self) -> tuple[ShadowSplit, ...]:
        return tuple(ShadowSplit(self.pool[row], self.pool[~row]) for row in self.keep[1:])

    @property
    def num_shadows(self) -> int:
        return self.keep.shape[0] - 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": _HALVES_FORMAT,
            "dataset": self.dataset,
            "trial": self.trial,
            "seed": self.seed,
            "pool": self.pool.tolist(),
            "keep": self.keep.astype(int).tolist(),
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write the split to ``path`` as JSON, atomically."""
        write_json(path, self.to_dict())


def make_halves_split(
    *, dataset: str, train_size: int, target_size: int, num_shadows: int, trial: int = 0, seed: int = 0
) -> HalvesSplit:
    """Draw a pool of ``2·target_size`` TRAIN records, the target's random half and paired shadow halves.

    Args:
        dataset: Name of the dataset the indices refer to (metadata).
        train_size: Size of the dataset's train split.
        target_size: Members per model (half the pool).
        num_shadows: Shadow models; even, ≥ 2.
        trial: Monte Carlo trial number (≥ 0).
        seed: Base seed (≥ 0).

    Raises:
        DPAuditError: an odd or too small shadow count, or a pool larger than the train split.
    """
    target_size = check_positive_int("target_size", target_size)
    num_shadows = check_positive_int("num_shadows", num_shadows, allow_zero=True)
    trial = check_positive_int("trial", trial, allow_zero=True)
    seed = check_positive_int("seed", seed, allow_zero=True)
    if num_shadows < 2 or num_shadows % 2:
        raise DPAuditError(
            f"split_design 'halves' needs an even num_shadows ≥ 2 (complementary pairs), got {num_shadows}"
        )
    if 2 * target_size > train_size:
        raise DPAuditError(
            f"split_design 'halves' needs a pool of 2·target_size = {2 * target_size} train images, "
            f"the train split holds {train_size}"
        )
    rng = np.random.default_rng([seed, trial, 2])
    pool = np.sort(rng.choice(train_size, size=2 * target_size, replace=False)).astype(np.int64)
    keep = np.zeros((1 + num_shadows, pool.size), dtype=bool)
    keep[0, rng.permutation(pool.size)[:target_size]] = True
    for pair in range(1, 1 + num_shadows, 2):
        keep[pair, rng.permutation(pool.size)[:target_size]] = True
        keep[pair + 1] = ~keep[pair]
    return HalvesSplit(dataset=dataset, trial=trial, seed=seed, pool=pool, keep=keep)


def load_split(path: str | os.PathLike) -> MIASplit | HalvesSplit:
    """Read a ``split.json`` of either design, validating it."""
    payload = _read_payload(path, "split")
    if isinstance(payload, dict) and payload.get("format") == _HALVES_FORMAT:
        missing = [key for key in ("dataset", "trial", "seed", "pool", "keep") if key not in payload]
        if missing:
            raise DPAuditError(f"{path}: missing field(s) {', '.join(missing)}")
        try:
            return HalvesSplit(
                dataset=payload["dataset"],
                trial=payload["trial"],
                seed=payload["seed"],
                pool=_as_index_array("pool", payload["pool"]),
                keep=np.asarray(payload["keep"]),
            )
        except (DPAuditError, TypeError, ValueError) as error:
            raise DPAuditError(f"{path}: {' '.join(str(error).split())}") from None
    return MIASplit.from_dict(payload, source=str(path))
