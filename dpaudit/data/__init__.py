"""Datasets as numpy arrays and the membership-inference data split.

``import dpaudit.data`` does not import torch or torchvision; torchvision is imported only when
``load_dataset(..., download=True)`` has to fetch files.
"""

from __future__ import annotations

from dpaudit.data.datasets import (
    DATASET_STATS,
    ArrayDataset,
    DatasetInfo,
    DatasetNotFoundError,
    available_datasets,
    dataset_info,
    load_dataset,
)
from dpaudit.data.splits import HalvesSplit, MIASplit, ShadowSplit, load_split, make_halves_split, make_mia_split

__all__ = [
    "ArrayDataset",
    "DATASET_STATS",
    "DatasetInfo",
    "DatasetNotFoundError",
    "HalvesSplit",
    "MIASplit",
    "ShadowSplit",
    "available_datasets",
    "dataset_info",
    "load_dataset",
    "load_split",
    "make_halves_split",
    "make_mia_split",
]
