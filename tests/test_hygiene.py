"""Repository hygiene: the license and citation files, one version source, run-folder names through RunDir."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import tomllib
from pathlib import Path

import yaml
from support import ROOT

import dpaudit
from dpaudit.integrity import MODEL_FILES, MODEL_FOLDERS, RUN_FILES
from dpaudit.rundir import TARGET, ModelDir, RunDir, shadow_name

PACKAGE = ROOT / "dpaudit"


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_one_version_source():
    """pyproject.toml's ``version`` is the one source: the installed metadata, ``dpaudit.__version__``, ``dpaudit
    --version`` and CITATION.cff all say it, and dpaudit/__init__.py writes no version of its own."""
    version = _pyproject()["version"]
    assert importlib.metadata.version("dpaudit") == version, "the installed metadata is stale: pip install -e ."
    assert dpaudit.__version__ == version
    assert not re.search(r"__version__\s*=\s*['\"]", (PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["version"] == version


def test_license_file_matches_the_declared_license():
    assert _pyproject()["license"] == {"text": "MIT"}
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n") and "Copyright (c) The dpaudit authors" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND' in text


def test_citation_file_is_cff_1_2_0():
    """The keys CFF 1.2.0 requires (cff-version, message, title, authors: each a person's family-names or an
    entity's name), and the optional ones this file promises, with the types the format gives them."""
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["cff-version"] == "1.2.0"
    for key in ("message", "title", "abstract", "version"):
        assert isinstance(citation[key], str) and citation[key].strip(), key
    assert citation["authors"] == [{"name": "The dpaudit authors"}]
    assert citation["license"] == _pyproject()["license"]["text"] == "MIT"  # an SPDX identifier
    assert citation["type"] == "software"
    assert set(citation) <= {"cff-version", "message", "title", "authors", "version", "license", "abstract", "type"} | {
        "keywords",
        "repository-code",
        "url",
        "date-released",
    }
    citing = (ROOT / "README.md").read_text(encoding="utf-8").split("## Citing", 1)[1].split("\n## ", 1)[0]
    assert "CITATION.cff" in citing


#: The run folder's file names, as RunDir/ModelDir give them (a shadow's and an epoch's as examples).
_RUN = RunDir("RUN")
_MODEL = _RUN.target
_RUN_NAMES = [_RUN.config, _RUN.split, _RUN.attack, _RUN.summary, _RUN.manifest, _RUN.scores(3), _RUN.audit("loss")]
_MODEL_NAMES = [
    _MODEL.metrics,
    _MODEL.ledger,
    _MODEL.epsilon,
    _MODEL.canaries,
    _MODEL.canaries_run,
    _MODEL.canaries_run.with_suffix(".json"),
    _MODEL.diagnostics,
    _MODEL.checkpoint(3),
    _MODEL.checkpoint(3).with_suffix(".json"),
    _MODEL.state(3),
]


def test_the_owned_names_of_integrity_are_the_layout_of_rundir():
    """A run owns (and ``--overwrite`` removes) exactly the names of its layout: every name RunDir and ModelDir give
    matches integrity's patterns, and every property of theirs is among those tried here."""
    assert all(RUN_FILES.fullmatch(path.name) for path in _RUN_NAMES), [p.name for p in _RUN_NAMES]
    assert all(MODEL_FILES.fullmatch(path.name) for path in _MODEL_NAMES), [p.name for p in _MODEL_NAMES]
    assert MODEL_FOLDERS.fullmatch(TARGET) and MODEL_FOLDERS.fullmatch(shadow_name(7))
    assert isinstance(_RUN.shadow(0), ModelDir) and _RUN.shadow(0).path.name == shadow_name(0)
    properties = {
        cls: {
            name
            for name, value in vars(cls).items()
            if not name.startswith("_") and (isinstance(value, property) or callable(value))
        }
        for cls in (RunDir, ModelDir)
    }
    assert properties[RunDir] == {
        "config",
        "split",
        "attack",
        "summary",
        "manifest",
        "scores",
        "audit",
        "model",
        "target",
        "shadow",
    }, "a new RunDir name: add it to _RUN_NAMES and to integrity.RUN_FILES"
    assert properties[ModelDir] == {
        "metrics",
        "ledger",
        "epsilon",
        "canaries",
        "canaries_run",
        "diagnostics",
        "checkpoint",
        "state",
        "states",
    }, "a new ModelDir name: add it to _MODEL_NAMES and to integrity.MODEL_FILES"


#: The paper reproduction, on its way out of the package into workflow/ (it names its files on its own there).
_REPRODUCTION = ("figures", "experiments.py", "results.py", "pipeline_config.py", "cli/pipeline.py")
_LAYOUT_NAMES = {path.name for path in _RUN_NAMES + _MODEL_NAMES if "3" not in path.name and "loss" not in path.name}
_LAYOUT_PATTERNS = re.compile(r"(epoch|state)_\{\}\.(pt|json)|scores_epoch_\{\}\.csv|audit_\{\}\.json")


def _literal_layout_names(path: Path) -> list[str]:
    """String literals in ``path``'s code (docstrings and messages aside) that spell a run-folder file name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            name = node.value.rsplit("/", 1)[-1]
            if name in _LAYOUT_NAMES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.JoinedStr):
            text = "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
            if _LAYOUT_PATTERNS.fullmatch(text.rsplit("/", 1)[-1]):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: f{text!r}")
    return found


def test_run_folder_names_only_through_rundir():
    """No module but dpaudit/rundir.py (and dpaudit/integrity.py's patterns) spells a run-folder file name: the
    others ask RunDir/ModelDir."""
    skipped = {PACKAGE / "rundir.py", *(PACKAGE / part for part in _REPRODUCTION)}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if not any(path == skip or skip in path.parents for skip in skipped):
            found += _literal_layout_names(path)
    assert found == [], "use dpaudit.rundir.RunDir / ModelDir:\n" + "\n".join(found)
    assert _literal_layout_names(PACKAGE / "rundir.py"), "the check found nothing in rundir.py: it checks nothing"


def test_the_gpu_checks_script_runs_every_module_that_holds_gpu_tests():
    # a gpu test is marked `gpu` or takes the fixture `device` (its CUDA case) or `cuda_without_tf32`
    script = (ROOT / "tools" / "gpu_checks.sh").read_text()
    listed = set(re.search(r"\nmodules=\(([^)]*)\)", script).group(1).split())
    holding = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").rglob("test_*.py")
        if re.search(r"@pytest\.mark\.gpu|\bdef test_\w*\([^)]*\b(device|cuda_without_tf32)\b", path.read_text())
    }
    assert holding == listed
