"""DPSGD-GC/DC (Liang et al.) theory figures and Table 1: files, evaluated claims, determinism."""

import functools
import inspect
import json

import pytest
from support import ROOT

from dpaudit._validation import DPAuditError
from reproduce.cli import claims_markdown, main
from reproduce.figures import FIGURES
from reproduce.figures import _paper as P
from reproduce.figures._paper import KINDS, VERDICTS
from reproduce.results import gallery_markdown

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
        assert claim["verdict"] in VERDICTS and claim["kind"] in KINDS and claim["test"] and claim["numbers"]


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
    assert entry["claims"][0]["verdict"] == "holds" and entry["claims"][0]["kind"] == "paper"
    # as in the paper's Fig 1, the SGM-based curves are drawn outside their validity conditions; the manifest says so
    assert set(entry["validity_conditions_violated"]) == {"mironov-composition", "altschuler-talwar2022"}


def test_figures_are_byte_identical_when_redrawn(tmp_path):
    FIGURES["dpsgd_dc/figure5"](out_dir=tmp_path / "a")
    FIGURES["dpsgd_dc/figure5"](out_dir=tmp_path / "b")
    for suffix in (".png", ".pdf"):
        assert (tmp_path / "a" / f"figure5{suffix}").read_bytes() == (tmp_path / "b" / f"figure5{suffix}").read_bytes()


@pytest.mark.integration
def test_manifest_merges_entries(tmp_path, capsys):
    for name in ("dpsgd_dc/figure1", "dpsgd_dc/figure5"):
        main(["figure", name, "--out", str(tmp_path)])
    entries = [str(tmp_path / "figure1.manifest.json"), str(tmp_path / "figure5.manifest.json")]
    assert main(["manifest", *entries, "--out", str(tmp_path / "manifest.json")]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [f["figure"] for f in manifest["figures"]] == ["Fig 1", "Fig 5"]
    assert "paper claims: 3 (3 holds, 0 contradicted, 0 inconclusive)" in capsys.readouterr().out


def _claim_entry(name, *claims):
    return {"name": name, "figure": "Fig 9", "files": ["x/figure9.png"], "claims": list(claims)}


def test_claims_table_lists_paper_claims_and_checks_apart(tmp_path):
    entries = [
        _claim_entry(
            "x/figure9",
            P.claim("A beats B", "inconclusive", test="difference |a − b|, 95 % CI", gap=0.01),
            P.claim("ε is concave", "holds", test="exact", kind="check", eps=[1, 2]),
            P.claim("C beats D", "contradicted", test="exact", gap=-0.5),
        )
    ]
    text = claims_markdown(entries, skipped=[])
    paper, checks = text.split("## Checks of the toolkit")
    assert "| figure | claim | the paper's words | verdict | test |" in paper
    assert "2 (0 holds, 1 contradicted, 1 inconclusive)" in paper and "**inconclusive**" in paper
    assert "difference \\|a − b\\|, 95 % CI" in paper  # a pipe inside a cell is escaped
    assert "ε is concave" in checks and "ε is concave" not in paper
    assert "1 (1 holds, 0 contradicted, 0 inconclusive)" in checks
    gallery = gallery_markdown(entries)
    assert "0/2 paper claims hold, 1 contradicted; 1 checks of the toolkit" in gallery


def test_gallery_shows_every_image_of_an_entry():
    """An entry with several PNGs (the audit's lower bounds and both ROC curves) gets a thumbnail for each; a table
    gets a link."""
    entries = [
        {"name": "audit/audit", "figure": "audit", "files": ["a/lower_bounds.png", "a/roc_canary.png"], "claims": []},
        {"name": "x/table2", "figure": "Table 2", "files": ["x/table2.md", "x/table2.tex"], "claims": []},
    ]
    gallery = gallery_markdown(entries)
    assert '<img src="a/lower_bounds.png"' in gallery and '<img src="a/roc_canary.png"' in gallery
    assert "audit: roc_canary" in gallery and '<a href="x/table2.md">Table 2 (table)</a>' in gallery


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"verdict": "yes"}, "verdict"),
        ({"kind": "toolkit"}, "kind"),
        ({"test": ""}, "test and numbers"),
        ({"numbers": {}}, "test and numbers"),
    ],
)
def test_claim_refuses_a_bad_verdict_kind_or_no_numbers(bad, match):
    arguments = {"verdict": "holds", "kind": "paper", "test": "exact", "numbers": {"x": 1}, **bad}
    with pytest.raises(DPAuditError, match=match):
        P.claim("c", arguments["verdict"], test=arguments["test"], kind=arguments["kind"], **arguments["numbers"])


def test_combine_known_answers():
    assert P.combine(["holds", "holds"]) == "holds"
    assert P.combine(["holds", "inconclusive"]) == "inconclusive"
    assert P.combine(["inconclusive", "contradicted", "holds"]) == "contradicted"
    assert P.combine([]) == "inconclusive"


def _runs(*accuracies, n=360, dp_claim=True):
    """Summarised single-epoch runs at the given test accuracies, each on n test records."""
    return [{"config": {"target_size": n}, "test_accuracy": [a], "dp_claim": dp_claim} for a in accuracies]


def test_accuracy_verdict_adds_the_test_sets_binomial_error():
    """Two single runs at 80 % and 85 % on n_test records: SE of the difference = √(0.8·0.2/n + 0.85·0.15/n); with
    two trials each, the trials' variance s²/m is added."""

    verdict, numbers = P.accuracy_verdict(_runs(0.85), _runs(0.80))
    se = (0.8 * 0.2 / 360 + 0.85 * 0.15 / 360) ** 0.5  # 0.02824
    assert numbers["standard_error"] == pytest.approx(se) and verdict == "inconclusive"  # 0.05 − 1.96·0.0282 < 0
    assert P.accuracy_verdict(_runs(0.85, n=3600), _runs(0.80, n=3600))[0] == "holds"  # SE 0.00893
    assert P.accuracy_verdict(_runs(0.80, n=3600), _runs(0.85, n=3600))[0] == "contradicted"
    # trials 0.84 and 0.86 (mean 0.85, s² = 0.0002, s²/m = 0.0001) against 0.80 and 0.80 (s² = 0)
    _, numbers = P.accuracy_verdict(_runs(0.84, 0.86, n=3600), _runs(0.80, 0.80, n=3600))
    assert numbers["standard_error"] ** 2 == pytest.approx(0.85 * 0.15 / 3600 + 0.0001 + 0.8 * 0.2 / 3600)
    assert P.lower_bound_verdict([0.0, 0.0], [1.0, 2.0]) == "inconclusive"  # no power: vacuous
    assert P.lower_bound_verdict([0.3, 0.0], [1.0, 2.0]) == "holds"
    assert P.lower_bound_verdict([1.5, 0.0], [1.0, 2.0]) == "contradicted"


def test_single_run_verdicts_say_how_much_training_spread_they_survive():
    """Two single runs, 0.85 against 0.80 on 3600 test records: SE² = v = 0.85·0.15/3600 + 0.8·0.2/3600. A seed-to-
    seed SD s per run adds 2s², so the interval touches 0 where 0.05 = 1.96·√(v + 2s²): s = √(((0.05/1.96)² − v)/2)."""

    runs = functools.partial(_runs, n=3600)

    verdict, numbers = P.accuracy_verdict(runs(0.85), runs(0.80))
    v = 0.85 * 0.15 / 3600 + 0.8 * 0.2 / 3600
    q = 1.959963984540054
    s = ((0.05 / q) ** 2 - v) ** 0.5 / 2**0.5  # 0.0107
    assert verdict == numbers["verdict"] == "holds"
    assert numbers["stands_up_to_training_sd"] == pytest.approx(s)
    for scale, expected in ((0.99, "holds"), (1.01, "inconclusive")):  # just below and above s
        se = (v + 2 * (scale * s) ** 2) ** 0.5
        assert P.decide(difference=0.05, standard_error=se) == expected
    contradicted = P.accuracy_verdict(runs(0.80), runs(0.85), margin=0.0)[1]
    assert contradicted["stands_up_to_training_sd"] == pytest.approx(s)  # symmetric about the margin
    assert "stands_up_to_training_sd" not in P.accuracy_verdict(runs(0.84, 0.86), runs(0.80, 0.80))[1]  # modelled
    assert "stands_up_to_training_sd" not in P.accuracy_verdict(runs(0.85, n=360), runs(0.80, n=360))[1]  # undecided

    def comparison(verdict, tolerated=None):
        return {"verdict": verdict, **({"stands_up_to_training_sd": tolerated} if tolerated is not None else {})}

    holds = P.claim("A beats B, C", "holds", test="t", b=comparison("holds", 0.03), c=comparison("holds", 0.01))
    assert P.claim_training_sd_tolerated(holds) == 0.01  # the least robust comparison
    against = P.claim(
        "A beats B, C", "contradicted", test="t", b=comparison("contradicted", 0.02), c=comparison("holds", 0.05)
    )
    assert P.claim_training_sd_tolerated(against) == 0.02  # only the contradicting comparisons count
    assert P.claim_training_sd_tolerated(P.claim("x", "holds", test="t", b=comparison("holds"))) is None
    assert P.claim_training_sd_tolerated(P.claim("x", "inconclusive", test="t", b=comparison("inconclusive"))) is None
    text = claims_markdown([_claim_entry("x/figure9", holds)], skipped=[])
    assert "stands while one run's seed-to-seed SD is below 1.0 points" in text and "For scale" not in text
    # trials 0.84, 0.86 (s = 0.01414) and 0.79, 0.81, 0.80 (s = 0.01): their SDs, for scale
    numbers = P.accuracy_verdict(runs(0.84, 0.86), runs(0.79, 0.81, 0.80))[1]
    assert numbers["trial_sd"] == pytest.approx([0.02**0.5 / 10, 0.01])
    # non-private runs' spread is not a DP run's: not recorded for the floor
    assert "trial_sd" not in P.accuracy_verdict(_runs(0.84, 0.86, dp_claim=False), runs(0.5))[1]
    # one side a single run, the other two: the single side's spread is what the verdict does not model
    mixed = P.accuracy_verdict(runs(0.85), runs(0.79, 0.81))[1]
    v_mixed = 0.85 * 0.15 / 3600 + 0.8 * 0.2 / 3600 + 0.0001
    assert mixed["stands_up_to_training_sd"] == pytest.approx(((0.05 / q) ** 2 - v_mixed) ** 0.5)
    modelled = P.claim("A beats B", numbers["verdict"], test="t", b=numbers)
    text = claims_markdown([_claim_entry("x/figure9", holds, modelled)], skipped=[])
    assert "that standard deviation is 1.2 points (median of 2 settings, 1.0–1.4)" in text


def test_a_single_run_verdict_below_the_smallest_measured_spread_is_inconclusive(tmp_path):
    """The run measured seed-to-seed SDs of 1 and 2 points where it had two DP runs of a setting (median 1.5). A
    contradiction that stands only below 0.5 points is decided by noise: inconclusive, its former verdict kept; one
    that stands up to 1.6 points, and a claim with no single-run comparison, keep theirs. With no spread measured
    nothing changes. The figure's own manifest is rewritten to say what the merged one says."""

    def comparison(verdict, tolerated):
        return {"verdict": verdict, "stands_up_to_training_sd": tolerated}

    def entries():
        fragile = P.claim("A beats B", "contradicted", test="t", b=comparison("contradicted", 0.005))
        robust = P.claim("A beats C", "contradicted", test="u", c=comparison("contradicted", 0.016))
        modelled = P.claim("A beats D", "holds", test="w", d={"verdict": "holds", "trial_sd": [0.01, 0.02]})
        return [_claim_entry("x/figure9", fragile, robust, modelled)]

    settled = entries()
    assert P.settle_by_measured_spread(settled) == 0.015
    fragile, robust, modelled = settled[0]["claims"]
    assert fragile["verdict"] == "inconclusive" and fragile["numbers"]["verdict_without_training_spread"] == (
        "contradicted"
    )
    assert (
        "below 0.5 points, less than the median this pipeline run measured between seeds of DP runs (1.5)"
        in (fragile["test"])
    )
    assert (robust["verdict"], modelled["verdict"]) == ("contradicted", "holds")
    unmeasured = entries()
    del unmeasured[0]["claims"][2]
    assert P.settle_by_measured_spread(unmeasured) is None
    assert unmeasured[0]["claims"][0]["verdict"] == "contradicted"
    # the pipeline's manifest step settles them before writing the manifest and the table
    paths = []
    for index, claim in enumerate(entries()[0]["claims"]):
        paths.append(tmp_path / f"figure{index}.manifest.json")
        paths[-1].write_text(json.dumps(_claim_entry(f"x/figure{index}", claim)))
    table = tmp_path / "claims.md"
    assert main(["manifest", *map(str, paths), "--out", str(tmp_path / "m.json"), "--table", str(table)]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["figures"][0]["claims"][0]["verdict"] == "inconclusive"
    assert "is decided by noise, and is inconclusive" in table.read_text()
    assert json.loads(paths[0].read_text())["claims"][0]["verdict"] == "inconclusive"  # the figure's own manifest
    assert json.loads(paths[1].read_text())["claims"][0]["verdict"] == "contradicted"


def test_a_superiority_claim_the_data_show_equivalent_is_contradicted():
    """0.851 against 0.850 on 100,000 test records each: SE = √(2·0.85·0.15/1e5) = 0.0016, 90 % CI
    0.001 ± 0.0026, inside ±1 point: no advantage, so "A beats B" is contradicted; on 360 records it stays
    inconclusive, and a non-inferiority claim (negative margin) is not turned by it."""
    verdict, numbers = P.accuracy_verdict(_runs(0.851, n=100_000), _runs(0.850, n=100_000))
    assert (verdict, numbers["equivalent_within"]) == ("contradicted", 0.01)
    assert "stands_up_to_training_sd" not in numbers  # equivalence, not a gap, decided it
    assert P.accuracy_verdict(_runs(0.851), _runs(0.850))[0] == "inconclusive"
    assert P.accuracy_verdict(_runs(0.851, n=100_000), _runs(0.850, n=100_000), margin=-0.01)[0] == "holds"
    assert P.accuracy_verdict(_runs(0.851, n=100_000), _runs(0.850, n=100_000), equivalence=None)[0] == "inconclusive"
    assert "TOST" in P.accuracy_test(_runs(0.9)) and "TOST" not in P.accuracy_test(_runs(0.9), equivalence=False)


def test_one_finding_tested_in_several_figures_counts_once():
    first = P.claim("bound covers both directions", "contradicted", test="exact", x=1)
    first["counts_once_as"] = "dpsgd_dc/adjacency"
    entries = [_claim_entry("x/figure2", first), _claim_entry("x/figure3", dict(first))]
    text = claims_markdown(entries, skipped=[])
    assert "1 (0 holds, 1 contradicted, 0 inconclusive)" in text
    assert text.count("the same finding as above, counted once") == 1


def test_paper_claims_carry_the_papers_words(tmp_path):
    """Every paper claim of a drawn figure carries its quote and section (or says no sentence makes it); a claim the
    quotes file lacks is an error, not a silent omission."""
    assert main(["figure", "dpsgd_dc/figure1", "--out", str(tmp_path)]) == 0
    entry = json.loads((tmp_path / "figure1.manifest.json").read_text())
    paper = [c for c in entry["claims"] if c["kind"] == "paper"]
    assert paper and all(c["quote"] and c["section"] for c in paper)
    assert "As shown in Figure 1" in paper[0]["quote"]
    with pytest.raises(DPAuditError, match="has no entry in quotes.yaml"):
        P.attach_quotes({"claims": [P.claim("An unquoted claim", "holds", test="t", x=1)]}, name="dpsgd_dc/figure1")


def test_every_paper_claim_in_the_committed_figures_is_quoted():
    for path in sorted((ROOT / "figures").glob("*/*.manifest.json")):
        if path.parent.name in ("audit",):
            continue
        for claim in json.loads(path.read_text())["claims"]:
            if claim["kind"] == "paper":
                assert "quote" in claim and (claim["quote"] or claim.get("note")), (path.name, claim["claim"])


def test_an_inconclusive_claim_over_several_comparisons_counts_them():
    """ "every pair must hold": two pairs hold and one is undecided, so the claim is inconclusive and the table says
    how close it came; a decided claim, or one with a single comparison, gets no count."""
    pairs = {"a vs b": {"verdict": "holds"}, "b vs c": {"verdict": "inconclusive"}, "c vs d": {"verdict": "holds"}}
    near = P.claim("a > b > c > d", "inconclusive", test="t", comparisons=pairs)
    assert P.comparison_verdicts(near) == {"holds": 2, "contradicted": 0, "inconclusive": 1}
    single = P.claim("a > b", "inconclusive", test="u", comparisons={"a vs b": {"verdict": "inconclusive"}})
    decided = P.claim(
        "a > c", "holds", test="w", comparisons={"a vs c": {"verdict": "holds"}, "x": {"verdict": "holds"}}
    )
    text = claims_markdown([_claim_entry("x/figure9", near, single, decided)], skipped=[])
    assert "| t; of its 3 comparisons: 2 hold, 0 contradicted, 1 inconclusive |" in text
    assert "| u |" in text and "| w |" in text


@pytest.mark.integration
def test_theorem_3_3_3_4_are_flagged_one_sided(tmp_path):
    for name in ("dpsgd_dc/figure1", "dpsgd_dc/figure5", "dpsgd_dc/table1"):
        assert "one direction of add/remove adjacency only" in FIGURES[name](out_dir=tmp_path)["caveat"]
    assert "one adjacency direction only" in (tmp_path / "table1.md").read_text()
    # the finding at the paper's experimental parameters (z = 0.01, q = 0.01, α = 1.1): A = 2αC²/(nbσ²) = 220
    # against the exact remove-direction RDP, which here equals 11·log(0.01) + 5500 (privacy review, D1)
    [finding] = [c for c in FIGURES["dpsgd_dc/table1"](out_dir=tmp_path)["claims"] if "finding" in c]
    assert finding["finding"] == "the paper's bound does not cover the other adjacency direction"
    numbers = finding["numbers"]
    assert numbers["paper_per_step_rdp"]["paper experiments"] == pytest.approx(220.0)
    assert numbers["other_direction_exact_rdp"]["paper experiments"] == pytest.approx(5449.343, abs=1e-3)
    exact_row = next(line for line in (tmp_path / "table1.md").read_text().splitlines() if "Exact accountant" in line)
    assert "ε₁ = 5449 against A = 220" in exact_row  # the table gives the exact accountant beside the bounds


def test_latex_escape_writes_unicode_as_plain_latex():
    """pdflatex without Unicode support: Greek, relations, superscripts, markers go to math mode, specials are
    escaped, adjacent math shares one $…$, and < > | are never left in text mode (OT1 prints them as ¡ ¿ —)."""
    from reproduce.figures._paper import latex_escape

    assert latex_escape("ε̂ lower (95 %)") == r"$\hat{\varepsilon}$ lower (95 \%)"
    assert latex_escape("α ≤ α*") == r"$\alpha$ $\leq$ $\alpha^{*}$"
    assert latex_escape("b²σ²") == r"b$^{2}\sigma^{2}$"
    assert latex_escape("Ours † & Kong ‡") == r"Ours $^{\dagger}$ \& Kong $^{\ddagger}$"
    assert latex_escape("σ > 8√2 — x_1 #") == r"$\sigma$ $>$ 8$\surd$2 --- x\_1 \#"
    assert latex_escape("Hölder −1") == r"H\"older $-$1"
    assert latex_escape("plain text, 1.5") == "plain text, 1.5"


def test_table1_explains_its_markers_and_its_tex_is_ascii(tmp_path):
    """The † (tighter bound under extra Rényi assumptions) and ‡ (cyclic traversal) markers and α* are defined
    under the table; the .md keeps Unicode, the .tex is ASCII (pdflatex)."""
    entry = FIGURES["dpsgd_dc/table1"](out_dir=tmp_path)
    markdown = (tmp_path / "table1.md").read_text()
    rows = [line for line in markdown.splitlines() if line.startswith("| Ours")]
    assert len(rows) == 2 and all("†" in row for row in rows)
    assert "‡" in next(line for line in markdown.splitlines() if line.startswith("| Kong"))
    for marker in ("† A tighter bound", "‡ Exclusively suitable for cyclic", "α*(q, σ): the largest α > 1"):
        assert marker in markdown
    tex = (tmp_path / "table1.tex").read_text()
    assert tex.isascii(), sorted({c for c in tex if not c.isascii()})
    assert r"$^{\dagger}$" in tex and r"$\alpha^{*}$" in tex
    assert len(entry["notes"]) == 5


def test_every_paper_table_tex_is_ascii(tmp_path):
    """write_table (every paper table and the validation table) escapes its caption, header and cells."""
    from reproduce.figures._paper import write_table

    files = write_table(
        tmp_path / "t", ["target ε", "ε̂ lower (95 %)"], [["1", "≥ 0.31 ± ∞ – Λ Δ ρ δ"]], caption="ε per step, σ"
    )
    tex = next(f for f in files if f.suffix == ".tex").read_text()
    assert tex.isascii() and r"\caption{$\varepsilon$ per step, $\sigma$}" in tex
    assert "ε̂" in next(f for f in files if f.suffix == ".md").read_text()  # Markdown keeps Unicode
