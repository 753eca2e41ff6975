"""DPSGD-GC/DC (Liang et al.) theory figures and Table 1: files, evaluated claims, determinism."""

import inspect
import json

import pytest

from dpaudit.cli import main
from dpaudit.figures import FIGURES

THEORY_FIGURES = sorted(
    name
    for name, draw in FIGURES.items()
    if name.startswith("dpsgd_dc/") and "runs" not in inspect.signature(draw).parameters
)


def test_theory_and_data_figures_are_registered():
    assert THEORY_FIGURES == ["dpsgd_dc/figure1", "dpsgd_dc/figure5", "dpsgd_dc/table1"]
    assert {"dpsgd_dc/figure2", "dpsgd_dc/figure3", "dpsgd_dc/figure4"} <= set(FIGURES)


@pytest.mark.parametrize("name", THEORY_FIGURES)
def test_figure_writes_files_and_manifest_entry(name, tmp_path, capsys):
    assert main(["figure", name, "--out", str(tmp_path)]) == 0
    stem = name.split("/")[-1]
    entry = json.loads((tmp_path / f"{stem}.manifest.json").read_text())
    assert entry["name"] == name and entry["paper"].startswith("Liang et al.")
    for path in entry["files"]:
        with open(path, "rb") as stream:
            assert len(stream.read()) > 200
    for claim in entry["claims"]:
        assert isinstance(claim["holds"], bool) and claim["numbers"]


def test_figure1_claims_use_the_computed_values(tmp_path):
    entry = FIGURES["dpsgd_dc/figure1"](out_dir=tmp_path)
    values = entry["claims"][0]["numbers"]["values_at_T"]
    assert values == pytest.approx(
        {
            "feldman2018": 27.5,
            "mironov-composition": 6.875,
            "kong-ribero2024": 3.90641,
            "altschuler-talwar2022": 0.6875,
            "dpsgd-dc": 1.684375,
        },
        rel=1e-5,
    )
    assert entry["claims"][0]["holds"]
    # as in the paper's Fig 1, the SGM-based curves are drawn outside their validity conditions; the manifest says so
    assert set(entry["validity_conditions_violated"]) == {"mironov-composition", "altschuler-talwar2022"}


def test_figures_are_byte_identical_when_redrawn(tmp_path):
    FIGURES["dpsgd_dc/figure5"](out_dir=tmp_path / "a")
    FIGURES["dpsgd_dc/figure5"](out_dir=tmp_path / "b")
    for suffix in (".png", ".pdf"):
        assert (tmp_path / "a" / f"figure5{suffix}").read_bytes() == (tmp_path / "b" / f"figure5{suffix}").read_bytes()


def test_manifest_merges_entries(tmp_path, capsys):
    for name in ("dpsgd_dc/figure1", "dpsgd_dc/figure5"):
        main(["figure", name, "--out", str(tmp_path)])
    entries = [str(tmp_path / "figure1.manifest.json"), str(tmp_path / "figure5.manifest.json")]
    assert main(["manifest", *entries, "--out", str(tmp_path / "manifest.json")]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [f["figure"] for f in manifest["figures"]] == ["Fig 1", "Fig 5"]
    assert "3 of 3 paper claims hold" in capsys.readouterr().out
