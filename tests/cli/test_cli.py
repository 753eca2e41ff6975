"""The command line: help, the train → attack workflow, theory values, one-line errors."""

import json
import math
import subprocess
import sys

import pytest
from support import TRAIN_ARGS

from dpaudit.cli import main


@pytest.mark.parametrize(
    "argv", [["--help"], ["train", "--help"], ["attack", "--help"], ["theory", "--help"], ["list", "--help"]]
)
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    assert "usage: dpaudit" in capsys.readouterr().out


def test_light_import_and_instant_help():
    code = (
        "import sys, dpaudit, dpaudit.data, dpaudit.theory, dpaudit.config, dpaudit.ledger, dpaudit.cli;"
        "dpaudit.cli.build_parser();"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_train_then_attack(tmp_path, capsys):
    assert main(TRAIN_ARGS + ["--out", str(tmp_path / "run")]) == 0
    assert "trained 2 models" in capsys.readouterr().out
    assert main(["attack", "--run", str(tmp_path / "run"), "--attack-epochs", "5", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "FPR" in out and "FNR" in out and "ε̂" in out
    assert json.loads((tmp_path / "run" / "attack.json").read_text())["results"][0]["epoch"] == 2


def test_config_file_with_flag_override(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        "dataset: digits\nmodel: mlp\noptimizer: sgd\nepochs: 1\nbatch_size: 50\ntarget_size: 100\nnum_shadows: 0\n"
    )
    assert main(["train", "--config", str(config), "--epochs", "2", "--out", str(tmp_path / "r"), "--quiet"]) == 0
    saved = json.loads((tmp_path / "r" / "config.json").read_text())["config"]
    assert saved["model"] == "mlp" and saved["epochs"] == 2


@pytest.mark.parametrize(
    "change, message",
    [
        (["--optimizer", "sgd"], "clip_norm is not a setting of sgd (its settings: lr, momentum, delta, accountant)"),
        (["--active-ratio", "0.2"], "active_ratio is not a setting of dpsgd-gc"),
        (["--sigma-dp", "-1"], "sigma_dp"),
        (["--clip-norm", "-1"], "clip_norm"),
        (["--batch-size", "5000"], "larger than the training data"),
        (["--optimizer", "dpsgd-dc", "--domain-radius", "0"], "domain_radius"),
        (["--optimizer", "dpsgd-dc", "--domain-radius", "-3"], "domain_radius"),
    ],
)
def test_bad_input_is_one_line_before_training(tmp_path, capsys, change, message):
    out = tmp_path / "run"
    assert main(TRAIN_ARGS + change + ["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dpaudit: error:") and message in err and "\n" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    "change, message",
    [
        (["--optimizer", "adam"], "argument --optimizer: invalid choice: 'adam'"),
        (["--dataset", "imagenet"], "argument --dataset: invalid choice: 'imagenet'"),
        (["--model", "vgg"], "argument --model: invalid choice: 'vgg'"),
    ],
)
def test_unknown_names_are_refused_by_the_flags_choices(tmp_path, capsys, change, message):
    with pytest.raises(SystemExit) as info:
        main(TRAIN_ARGS + change + ["--out", str(tmp_path / "run")])
    assert info.value.code == 2
    assert message in capsys.readouterr().err and not (tmp_path / "run").exists()


def test_theory_command_reproduces_figure1_value(capsys):
    assert (
        main(
            [
                "theory",
                "dpsgd-dc",
                "--steps",
                "0,10,49,200",
                "--alpha",
                "1.1",
                "--L",
                "1",
                "--C",
                "2",
                "--sigma",
                "4",
                "--D",
                "1",
                "--n",
                "8",
                "--b",
                "2",
                "--eta",
                "0.2",
                "--json",
            ]
        )
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    assert payload["epsilon_rdp"] == pytest.approx([0.0, 0.34375, 1.684375, 1.684375])


def test_theory_flags_the_one_sided_bound_beside_the_exact_accountant(capsys):
    # the DPSGD-GC/DC paper's experimental parameters: z = σb/C = 0.01, q = b/n = 0.01
    argv = ["theory", "dpsgd-gc", "--steps", "1,3", "--alpha", "1.1", "--C", "20", "--sigma", "0.002"]
    assert main(argv + ["--n", "10000", "--b", "100", "--delta", "1e-5", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert "one direction only" in payload["caveat"]
    assert payload["epsilon_rdp"] == pytest.approx([220.0, 660.0])  # 2αC²T/(nbσ²)
    exact = payload["exact_accountant"]
    # α/(α−1)·log q + α/(2z²) = 11·log(0.01) + 5500, which the exact remove-direction RDP attains here
    assert exact["per_step_rdp"] == pytest.approx(11 * math.log(0.01) + 5500, rel=1e-9)
    assert exact["epsilon_rdp"] == pytest.approx([exact["per_step_rdp"] * t for t in (1, 3)])
    assert exact["epsilon_dp_at_alpha"][0] == pytest.approx(exact["per_step_rdp"] + math.log(1e5) / 0.1)
    argv = ["theory", "feldman2018", "--steps", "1", "--alpha", "1.1", "--C", "2", "--sigma", "4", "--b", "2"]
    assert main(argv + ["--json"]) == 0
    assert "caveat" not in json.loads(capsys.readouterr().out)  # only the one-sided bounds carry it


def test_theory_epochs_and_conditions(capsys):
    assert (
        main(
            [
                "theory",
                "mironov-composition",
                "--epochs",
                "1",
                "--alpha",
                "1.1",
                "--C",
                "2",
                "--sigma",
                "4",
                "--n",
                "8",
                "--b",
                "2",
                "--json",
            ]
        )
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    assert payload["steps"] == [4]
    assert payload["epsilon_rdp"] == pytest.approx([4 * 0.034375])
    assert any("q ≤ 1/5" in line for line in payload["conditions_violated"])


def test_attack_on_missing_run_is_one_line(tmp_path, capsys):
    assert main(["attack", "--run", str(tmp_path / "nothing")]) == 2
    assert "run `dpaudit train` first" in capsys.readouterr().err


def test_list_commands(capsys):
    for what in ("datasets", "models", "optim", "bounds", "attacks", "settings"):
        assert main(["list", what]) == 0
    out = capsys.readouterr().out
    assert "dpsgd-dc" in out and "resnet18-gn" in out and "cifar10" in out and "kong-ribero2024" in out
    assert "lira-online" in out and "clip_norm" in out


@pytest.mark.parametrize("what", ["attacks", "optim", "settings", "bounds"])
def test_list_rows_align_and_match_their_json(what, capsys):
    """Each row is its name, padded to one column past the longest name, then its text; --json lists the same
    entries in the same order."""
    assert main(["list", what]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert main(["list", what, "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    names = [entry["name"] for entry in entries]
    assert len(rows) == len(entries) > 1 and len(set(names)) == len(names)
    column = max(map(len, names)) + 2
    for row, name in zip(rows, names):
        assert row[:column] == name.ljust(column) and row[column] != " ", row


def test_list_json_holds_each_registry_record(capsys):
    from dpaudit import optim
    from dpaudit.attacks import ATTACKS
    from dpaudit.settings import SETTINGS

    assert main(["list", "attacks", "--json"]) == 0
    attacks = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert list(attacks) == list(ATTACKS)
    assert attacks["canary-final"]["family_statistic"] == "final-model" and attacks["canary"]["claim"] == "mechanism"
    assert [name for name, entry in attacks.items() if entry["scores_a_model"]] == ["loss", "confidence"]
    assert main(["list", "settings", "--json"]) == 0
    settings = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert list(settings) == list(SETTINGS)
    assert settings["lr"]["default"] == SETTINGS["lr"].default and settings["lr"]["choices"] is None
    assert any(entry["choices"] for entry in settings.values())
    assert main(["list", "optim"]) == 0
    rows = dict(line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines())
    for name in optim.available():  # "no DP claim" once, where it applies
        said = rows[name].count("no DP claim")
        assert said == (0 if optim.get_spec(name).dp_claim else 1), rows[name]


def test_results_on_stdout_status_on_stderr_json_on_request(tmp_path, capsys):
    scores = tmp_path / "scores.csv"
    scores.write_text("score,is_member\n" + "".join(f"{i / 40 + (i % 2)},{i % 2}\n" for i in range(40)))
    out = tmp_path / "audit.json"
    assert main(["audit", "--scores", str(scores), "--out", str(out), "--no-plot"]) == 0
    text = capsys.readouterr()
    assert text.err == f"wrote {out}\n" and "ε̂" in text.out and "wrote" not in text.out
    assert main(["audit", "--scores", str(scores), "--out", str(out), "--no-plot", "--json"]) == 0
    text = capsys.readouterr()
    [payload] = json.loads(text.out)
    assert payload == json.loads(out.read_text()) and payload["attack"] == "scores"
    # members score above every non-member here: AUC 1
    assert payload["report"]["auc"] == 1.0 and text.err == f"wrote {out}\n"

    common = ["--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"]
    assert main(["calibrate", "--target-epsilon", "2", *common, "--json"]) == 0
    calibrated = json.loads(capsys.readouterr().out)
    assert main(["calibrate", "--target-epsilon", "2", *common]) == 0
    assert capsys.readouterr().out.startswith(f"z = {calibrated['noise_multiplier']:.6g}: ε = ")
    z = str(calibrated["noise_multiplier"])
    assert main(["epsilon", "--noise-multiplier", z, *common, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["epsilon"]["rdp"] == pytest.approx(calibrated["epsilon"], rel=1e-12)
    assert main(["epsilon", "--noise-multiplier", z, *common]) == 0
    assert capsys.readouterr().out.startswith(f"ε = {calibrated['epsilon']:.6g} at δ = 1e-05 (rdp accountant")


def test_theory_prints_a_table_without_json(capsys):
    argv = ["theory", "dpsgd-gc", "--steps", "1,3", "--alpha", "1.1", "--C", "20", "--sigma", "0.002"]
    argv += ["--n", "10000", "--b", "100", "--delta", "1e-5"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "dpsgd-gc at α = 1.1 (C = 20, sigma = 0.002, n = 10000, b = 100)"
    assert lines[1].split()[:2] == ["T", "ε_RDP"] and "exact ε_RDP" in lines[1]
    assert lines[2].split()[:2] == ["1", "220"] and lines[3].split()[:2] == ["3", "660"]  # 2αC²T/(nbσ²)
    assert any(line.startswith("caveat: one direction only") for line in lines)
    assert main(["theory", "alpha-star", "--q", "0.01", "--sigma", "5"]) == 0
    assert capsys.readouterr().out.startswith("α*(q = 0.01, σ = 5) = ")


def test_python_m_dpaudit_without_torch():
    """``python -m dpaudit`` is the command; its --help imports no torch (-X importtime lists every import)."""
    import importlib.metadata

    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dpaudit", "--help"], capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith("usage: dpaudit")
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")]
    assert "dpaudit.cli" in imported and not [name for name in imported if name.split(".")[0] == "torch"]
    version = subprocess.run([sys.executable, "-m", "dpaudit", "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == f"dpaudit {importlib.metadata.version('dpaudit')}"


def test_epsilon_output_says_when_prv_fell_back_to_rdp(capsys):
    argv = ["epsilon", "--json", "--noise-multiplier", "0.5", "--sample-rate", "0.1", "--accountants", "rdp,prv"]
    argv.append("--steps")
    assert main(argv + ["10000"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["epsilon"]["prv"] == payload["epsilon"]["rdp"]  # the RDP bound, reported as such
    assert len(payload["notes"]) == 1 and "returning the RDP upper bound" in payload["notes"][0]
    assert main(argv + ["100"]) == 0  # a grid PRV can hold: its own ε, no note
    payload = json.loads(capsys.readouterr().out)
    assert payload["notes"] == [] and payload["epsilon"]["prv"] < payload["epsilon"]["rdp"]


def _ledger_run(path, *, sampling, dp_claim, z=1.0, steps_per_epoch=5, epochs=3):
    from dpaudit.ledger import PrivacyLedger

    ledger = PrivacyLedger(sampling=sampling, dp_claim=dp_claim)
    for _ in range(epochs):
        for _ in range(steps_per_epoch):
            ledger.record(noise_multiplier=z, sample_rate=1 / steps_per_epoch)
        ledger.end_epoch()
    (path / "target").mkdir(parents=True)
    (path / "target" / "ledger.json").write_text(json.dumps(ledger.to_dict()))
    return path


def test_epsilon_of_a_shuffled_run_gives_a_valid_upper_bound_beside_the_poisson_figure(tmp_path, capsys):
    from scipy.stats import norm

    run = _ledger_run(tmp_path / "run", sampling="shuffle", dp_claim=True)
    assert main(["epsilon", "--run", str(run), "--delta", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert "ε (shuffled)" in out and "not a guarantee for shuffled batches" in out and "approximate" not in out
    saved = json.loads((run / "target" / "epsilon.json").read_text())
    upper = saved["epsilon_shuffled_upper"]
    # after 3 epochs at z = 1: one Gaussian step per epoch, μ = √3 (Balle & Wang 2018: δ(ε) at the reported ε is δ)
    mu = math.sqrt(3)
    delta_at = norm.cdf(-upper[-1] / mu + mu / 2) - math.exp(upper[-1]) * norm.cdf(-upper[-1] / mu - mu / 2)
    assert delta_at == pytest.approx(1e-5, rel=1e-4)
    assert upper[-1] > saved["epsilon"]["rdp"][-1]  # here the Poisson figure understates it
    poisson = _ledger_run(tmp_path / "poisson", sampling="poisson", dp_claim=True)
    assert main(["epsilon", "--run", str(poisson), "--delta", "1e-5"]) == 0
    assert "shuffled" not in capsys.readouterr().out
    assert "epsilon_shuffled_upper" not in json.loads((poisson / "target" / "epsilon.json").read_text())


@pytest.mark.parametrize("sampling", ["poisson", "shuffle"])
def test_epsilon_of_a_run_without_a_dp_claim_is_labelled_claimed(tmp_path, capsys, sampling):
    """The saved ε of an optimizer with no DP claim names itself "claimed … (no DP guarantee)", the shuffled
    upper bound too; a DP-claiming Poisson run's is the "theoretical ε"."""
    run = _ledger_run(tmp_path / "run", sampling=sampling, dp_claim=False)
    assert main(["epsilon", "--run", str(run), "--delta", "1e-5"]) == 0
    assert "no DP claim" in capsys.readouterr().out
    saved = json.loads((run / "target" / "epsilon.json").read_text())
    labels = [saved["epsilon_label"]] + ([saved["epsilon_shuffled_upper_label"]] if sampling == "shuffle" else [])
    assert all(label.startswith("claimed ") and label.endswith("(no DP guarantee)") for label in labels)
    run = _ledger_run(tmp_path / "claiming", sampling="poisson", dp_claim=True)
    assert main(["epsilon", "--run", str(run), "--delta", "1e-5"]) == 0
    assert json.loads((run / "target" / "epsilon.json").read_text())["epsilon_label"] == "theoretical ε"


@pytest.mark.parametrize(
    "dp_claim, sampling, expected",
    [
        (True, "poisson", ["theoretical ε = 2 at δ = 1e-05 (rdp accountant)"]),
        (False, "poisson", ["claimed ε (no DP guarantee) = 2 at δ = 1e-05 (rdp accountant)"]),
        (
            False,
            "shuffle",
            [
                "claimed Poisson-sampling ε, not a guarantee for shuffled batches (no DP guarantee) = 2 at δ = 1e-05 "
                "(rdp accountant)",
                "claimed upper bound for shuffled batches: each epoch one unsubsampled Gaussian step per record (no DP "
                "guarantee): ε = 30 at δ = 1e-05",
            ],
        ),
        (
            True,
            "shuffle",
            [
                "Poisson-sampling ε, not a guarantee for shuffled batches = 2 at δ = 1e-05 (rdp accountant)",
                "upper bound for shuffled batches: each epoch one unsubsampled Gaussian step per record: ε = 30 at "
                "δ = 1e-05",
            ],
        ),
    ],
)
def test_train_labels_its_planned_epsilon(dp_claim, sampling, expected):
    from types import SimpleNamespace

    from dpaudit.cli.commands import _planned_epsilon_lines

    derived = {"planned_epsilon": 2.0, "dp_claim": dp_claim, "planned_epsilon_shuffled_upper": 30.0}
    config = SimpleNamespace(
        privacy=SimpleNamespace(delta=1e-5, accountant="rdp"), optimizer=SimpleNamespace(sampling=sampling)
    )
    assert _planned_epsilon_lines(derived, config) == expected
    assert _planned_epsilon_lines({**derived, "planned_epsilon": None}, config) == []


def test_a_missing_optional_dependency_is_one_line_naming_its_extra():
    from dpaudit.cli import user_error

    missing_torch = ModuleNotFoundError("No module named 'torch'", name="torch")
    assert user_error(missing_torch) == (
        'this command needs torch, which the core install leaves out: pip install "dpaudit[train]"'
    )
    missing_plots = ModuleNotFoundError("No module named 'matplotlib.pyplot'", name="matplotlib.pyplot")
    assert user_error(missing_plots).endswith('pip install "dpaudit[plot]"')
    assert user_error(ModuleNotFoundError("No module named 'numpyx'", name="numpyx")) is None  # a bug, not an extra
