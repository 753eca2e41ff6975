"""The membership-inference split (Liang et al., App. D.2; members and non-members as in the authors' code)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpaudit._validation import DPAuditError
from dpaudit.data import MIASplit, ShadowSplit, make_mia_split

BASE = dict(dataset="cifar10", train_size=500, test_size=120, target_size=100, num_shadows=4)


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


def test_sizes_and_disjointness():
    split = make_mia_split(**BASE, seed=7, trial=2, shadow_size=60)
    assert (split.dataset, split.seed, split.trial, split.num_shadows) == ("cifar10", 7, 2, 4)
    np.testing.assert_array_equal(split.target_members, np.arange(100))
    np.testing.assert_array_equal(split.target_nonmembers, np.arange(100))
    assert split.target_members.dtype == np.int64
    for shadow in split.shadows:
        assert len(shadow.members) == len(shadow.nonmembers) == 60
        both = np.concatenate([shadow.members, shadow.nonmembers])
        assert len(np.unique(both)) == 120  # without replacement
        assert both.min() >= 100 and both.max() < 500  # from the pool, never the target's data
    # shadows overlap one another (pool 400, each draws 120)
    union = set()
    total = 0
    for shadow in split.shadows:
        union |= set(shadow.members.tolist()) | set(shadow.nonmembers.tolist())
        total += 120
    assert len(union) < total


def test_paper_scale_defaults():
    split = make_mia_split(dataset="cifar10", train_size=50_000, test_size=10_000, target_size=10_000, num_shadows=10)
    assert len(split.target_members) == len(split.target_nonmembers) == 10_000
    assert len(split.shadows) == 10
    assert all(len(s.members) == len(s.nonmembers) == 10_000 for s in split.shadows)
    assert min(s.members.min() for s in split.shadows) >= 10_000


def test_same_seed_and_trial_reproduce():
    assert make_mia_split(**BASE, seed=3, trial=1) == make_mia_split(**BASE, seed=3, trial=1)
    random_a = make_mia_split(**BASE, seed=3, trial=1, target_members="random")
    assert random_a == make_mia_split(**BASE, seed=3, trial=1, target_members="random")


def test_trials_redraw_shadows_but_keep_first_target():
    first = make_mia_split(**BASE, seed=3, trial=0)
    second = make_mia_split(**BASE, seed=3, trial=1)
    other_seed = make_mia_split(**BASE, seed=4, trial=0)
    np.testing.assert_array_equal(first.target_members, second.target_members)
    np.testing.assert_array_equal(first.target_nonmembers, second.target_nonmembers)
    assert not np.array_equal(first.shadows[0].members, second.shadows[0].members)
    assert not np.array_equal(first.shadows[0].members, other_seed.shadows[0].members)
    assert first != second


def test_random_target_members():
    split = make_mia_split(**BASE, seed=1, target_members="random")
    members = split.target_members
    assert len(members) == 100 and len(np.unique(members)) == 100
    assert np.all(np.diff(members) > 0) and members.max() < 500
    assert not np.array_equal(members, np.arange(100))
    for shadow in split.shadows:
        assert not set(members.tolist()) & set(shadow.members.tolist())
        assert not set(members.tolist()) & set(shadow.nonmembers.tolist())
    np.testing.assert_array_equal(split.target_nonmembers, np.arange(100))


def test_no_shadows_and_tight_pool():
    split = make_mia_split(**{**BASE, "num_shadows": 0, "train_size": 100})
    assert split.shadows == ()
    tight = make_mia_split(**{**BASE, "train_size": 300, "num_shadows": 2})  # pool 200 = 2·100
    for shadow in tight.shadows:
        assert sorted(np.concatenate([shadow.members, shadow.nonmembers]).tolist()) == list(range(100, 300))


def test_save_load_round_trip(tmp_path):
    split = make_mia_split(**BASE, seed=5, trial=3, shadow_size=50)
    path = tmp_path / "splits" / "trial3.json"
    split.save(path)
    payload = json.loads(path.read_text())
    assert payload["dataset"] == "cifar10" and payload["trial"] == 3 and payload["seed"] == 5
    assert len(payload["shadows"]) == 4 and len(payload["shadows"][0]["members"]) == 50
    assert payload == split.to_dict()
    loaded = MIASplit.load(path)
    assert loaded == split
    assert not list(path.parent.glob(".*.tmp"))  # atomic write leaves no temporary file


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda p: p["shadows"][0]["members"].__setitem__(0, 3), ["target members", "shadow 0 members", "disjoint"]),
        (lambda p: p["shadows"][1]["nonmembers"].__setitem__(0, p["shadows"][1]["members"][0]), ["disjoint"]),
        (lambda p: p["target_members"].__setitem__(1, 0), ["repeat"]),
        (lambda p: p["target_nonmembers"].__setitem__(0, -1), ["non-negative"]),
        (lambda p: p["target_members"].__setitem__(0, 1.5), ["integers"]),
        (lambda p: p.pop("shadows"), ["missing", "shadows"]),
        (lambda p: p.__setitem__("trial", -1), ["trial"]),
    ],
)
def test_load_validates(tmp_path, edit, words):
    payload = make_mia_split(**BASE, seed=2).to_dict()
    edit(payload)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(DPAuditError) as error:
        MIASplit.load(path)
    message = one_line(error)
    assert "bad.json" in message
    for word in words:
        assert word in message


def test_load_missing_and_garbled(tmp_path):
    with pytest.raises(DPAuditError) as error:
        MIASplit.load(tmp_path / "absent.json")
    assert "absent.json" in one_line(error)
    (tmp_path / "garbled.json").write_text("{not json")
    with pytest.raises(DPAuditError) as error:
        MIASplit.load(tmp_path / "garbled.json")
    assert "JSON" in one_line(error)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"target_size": 0}, ["target_size"]),
        ({"train_size": -5}, ["train_size"]),
        ({"test_size": 0}, ["test_size"]),
        ({"num_shadows": -1}, ["num_shadows"]),
        ({"shadow_size": 0}, ["shadow_size"]),
        ({"trial": -1}, ["trial"]),
        ({"seed": 1.5}, ["seed"]),
        ({"target_size": 130}, ["target_size", "test split", "120"]),
        ({"target_size": 600, "test_size": 1000}, ["target_size", "train split", "500"]),
        ({"shadow_size": 201}, ["2·shadow_size = 402", "pool", "400"]),
        ({"target_members": "last"}, ["target_members", "first", "random"]),
        ({"dataset": ""}, ["dataset"]),
    ],
)
def test_bad_sizes_raise_one_line_errors(changes, words):
    with pytest.raises(DPAuditError) as error:
        make_mia_split(**{**BASE, **changes})
    message = one_line(error)
    for word in words:
        assert word in message


def test_direct_construction_validates():
    with pytest.raises(DPAuditError) as error:
        ShadowSplit(np.array([1, 2]), np.array([2, 3]))
    assert "disjoint" in one_line(error)
    with pytest.raises(DPAuditError) as error:
        MIASplit("x", 0, 0, np.arange(5), np.arange(5), (ShadowSplit(np.array([4]), np.array([6])),))
    assert "disjoint" in one_line(error)
    split = MIASplit("x", 0, 0, [0, 1], [0, 1], (ShadowSplit([2], [3]),))
    assert split.target_members.dtype == np.int64
    with pytest.raises(ValueError):
        split.target_members[0] = 9  # read-only
