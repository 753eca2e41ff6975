"""A run folder is owned, its files are checked, and a user's mistake is one line: nothing lost, nothing mixed."""

import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
from support import TRAIN_ARGS, interrupt_at_save

from dpaudit import integrity
from dpaudit._validation import DPAuditError
from dpaudit.cli import main
from dpaudit.summary import summarize_run


def train(out, *extra):
    return main([*TRAIN_ARGS, "--device", "cpu", *extra, "--out", str(out)])


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    """One finished run with canaries, attacked (scores on disk), copied by each test that changes it."""
    out = tmp_path_factory.mktemp("base") / "run"
    assert train(out, "--canaries", "20") == 0
    assert main(["attack", "--run", str(out), "--quiet", "--attack-epochs", "2"]) == 0
    return out


@pytest.fixture
def run(base_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(base_run, copy)
    return copy


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("dpaudit: error: "), err
    assert not any("Traceback" in line for line in err), err
    return err[-1]


# --- a run folder is owned ---------------------------------------------------------------------------------------


def test_a_folder_with_someone_elses_config_json_is_refused_and_left_as_it_was(tmp_path, capsys):
    out = tmp_path / "project"
    out.mkdir()
    (out / "config.json").write_text('{"theme": "dark"}')
    assert train(out) == 2
    assert "is not a dpaudit run's configuration" in error_line(capsys)
    assert (out / "config.json").read_text() == '{"theme": "dark"}'
    assert sorted(path.name for path in out.iterdir()) == ["config.json"]


def test_a_folder_of_other_files_is_refused_and_their_temporary_files_survive(tmp_path, capsys):
    out = tmp_path / "home"
    (out / "notes").mkdir(parents=True)
    keep = [out / ".draft.txt.a1b2.tmp", out / "notes" / ".config.json.c3d4.tmp", out / "notes" / "todo.md"]
    for path in keep:
        path.write_text("mine")
    assert train(out) == 2
    assert "is not empty and holds no dpaudit run" in error_line(capsys)
    assert all(path.read_text() == "mine" for path in keep)


def test_clean_up_removes_only_the_runs_own_temporary_files(run):
    (run / "notes").mkdir()
    own = [run / ".config.json.x1.tmp", run / "target" / ".ledger.json.x2.tmp"]
    strangers = [run / ".draft.txt.x3.tmp", run / "notes" / ".config.json.x4.tmp", run / "target" / ".mine.x5.tmp"]
    for path in own + strangers:
        path.write_text("partial")
    assert integrity.remove_partial_writes(run) == 2
    assert not any(path.exists() for path in own)
    assert all(path.exists() for path in strangers)


def test_another_configuration_is_refused_and_overwrite_replaces_the_whole_run(run, capsys):
    assert (run / "target" / "canaries.npz").is_file()
    assert train(run, "--lr", "0.2") == 2
    line = error_line(capsys)
    assert "holds a run of another configuration" in line and "lr: 0.1 → 0.2" in line and "--overwrite" in line
    assert (run / "target" / "canaries.npz").is_file()  # refused: nothing touched
    (run / "mine.txt").write_text("keep")
    assert train(run, "--lr", "0.2", "--overwrite") == 0
    # the first run's canaries and scores are gone, not audited beside the new run's ε
    assert not (run / "target" / "canaries.npz").exists() and not list(run.glob("scores_epoch_*.csv"))
    assert (run / "mine.txt").read_text() == "keep"
    assert json.loads((run / "config.json").read_text())["config"]["lr"] == 0.2
    assert main(["audit", "--run", str(run), "--attack", "canary", "--no-plot"]) == 2
    assert "no canary observations" in error_line(capsys)


def test_a_train_that_failed_before_writing_leaves_the_folder_free(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--dataset", "mnist", "--model", "mlp", "--data-root", str(tmp_path / "nodata")) == 2
    assert "not found" in error_line(capsys)
    assert train(out) == 0  # other flags, same folder: nothing of the failed one was kept


def test_a_train_killed_while_writing_its_first_file_leaves_the_folder_free(tmp_path):
    # killed inside its first write: the claim's manifest lists nothing, and the writes it began are temporary
    # files (the config's, and the manifest's rewrite recording it)
    out = tmp_path / "run"
    integrity.claim_run_folder(out, identity={"lr": 0.5})
    for name in (".config.json.k1.tmp", ".dpaudit-run.json.k2.tmp", ".dpaudit-run.lock"):
        (out / name).write_text("partial")
    assert train(out) == 0
    assert not list(out.glob("*.tmp"))
    assert integrity.check_complete(out) is None


def test_a_removal_of_an_empty_claim_cut_short_is_done_again(tmp_path, monkeypatch):
    out = tmp_path / "run"
    integrity.claim_run_folder(out, identity={"lr": 0.5})
    (out / ".dpaudit-run.lock").write_text("")
    unlink = Path.unlink

    def killed_after_one_file(self, missing_ok=False):
        unlink(self, missing_ok=missing_ok)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "unlink", killed_after_one_file)
    with pytest.raises(KeyboardInterrupt):
        integrity.claim_run_folder(out, identity={"lr": 0.1})
    monkeypatch.undo()
    assert train(out) == 0  # what is left is still a claim that wrote nothing


def test_a_train_killed_while_claiming_its_folder_is_replaced_with_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".dpaudit-run.json.k1.tmp").write_text("partial")  # the claim's own manifest, never renamed
    assert train(out) == 2
    assert "--overwrite to remove that run's leftover files" in error_line(capsys)
    assert train(out, "--overwrite") == 0
    assert not list(out.glob("*.tmp"))


def test_the_same_configuration_again_is_accepted(run, capsys):
    assert train(run, "--canaries", "20") == 0


@pytest.mark.parametrize("where", ["file", "below a file"])
def test_out_naming_a_file_is_one_line(where, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" if where == "file" else tmp_path / "afile" / "run"
    assert train(out) == 2
    assert "afile" in error_line(capsys)
    assert (tmp_path / "afile").read_text() == "x"


# --- integrity ---------------------------------------------------------------------------------------------------


def test_a_flipped_bit_in_a_checkpoint_is_refused_naming_it(run, capsys):
    checkpoint = run / "target" / "epoch_0002.pt"
    data = bytearray(checkpoint.read_bytes())
    data[len(data) // 2] ^= 1
    checkpoint.write_bytes(bytes(data))
    assert main(["attack", "--run", str(run), "--quiet"]) == 2
    assert f"{checkpoint} changed after dpaudit wrote it" in error_line(capsys)


def test_files_beside_another_tools_manifest_are_not_taken_for_a_run(tmp_path):
    from dpaudit._io import read_json, write_json

    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "manifest.json").write_text('{"figures": []}')  # the figures' manifest, not a run's
    write_json(tmp_path / "figures" / "tp_topk" / "figure1.manifest.json", {"claims": []})
    assert read_json(tmp_path / "figures" / "tp_topk" / "figure1.manifest.json") == {"claims": []}


def test_a_file_dpaudit_did_not_write_is_refused(run, capsys):
    (run / "target" / "epsilon.json").write_text("{}")
    assert main(["audit", "--run", str(run), "--attack", "canary", "--no-plot"]) == 0  # does not read it
    from dpaudit._io import read_json

    with pytest.raises(DPAuditError, match="is not recorded in"):
        read_json(run / "target" / "epsilon.json")


def test_an_edited_ledger_is_refused_even_with_its_hash_rewritten(run, capsys):
    assert main(["epsilon", "--run", str(run)]) == 0
    ledger = run / "target" / "ledger.json"
    payload = json.loads(ledger.read_text())
    planned = payload["runs"][0]["noise_multiplier"]
    payload["runs"][0]["noise_multiplier"] = 100.0  # ε ≈ 0: the run would claim far more privacy than it had
    ledger.write_text(json.dumps(payload))
    assert main(["epsilon", "--run", str(run)]) == 2
    assert "ledger.json changed after dpaudit wrote it" in error_line(capsys)
    integrity.record_write(ledger)  # a forger who also rewrites the manifest
    assert main(["epsilon", "--run", str(run)]) == 2
    line = error_line(capsys)
    assert "disagrees with the run's config.json: noise multiplier z = 100 at step 1" in line
    assert f"where the run planned {planned:g}" in line


def test_a_ledger_that_departs_on_purpose_is_read_and_an_edited_rate_is_not(tmp_path, capsys):
    """dpsgd-gc-understated-q's ledger records q/4 by design (the auditor validation's negative control): its run's
    ledger is what its optimizer plans, so it is read; the same rate written into a plain dpsgd-gc run's ledger is
    an edit. (The default pipeline's audit_run_bug jobs failed on the first, before the plan knew of the variant.)"""
    from dpaudit.optim import UNDERSTATED_SAMPLE_RATE_FACTOR
    from dpaudit.run import load_ledger

    variant, plain = tmp_path / "understated", tmp_path / "plain"
    assert train(variant, "--optimizer", "dpsgd-gc-understated-q") == 0
    assert train(plain) == 0
    recorded = {run["sample_rate"] for run in load_ledger(variant)["runs"]}
    (q,) = {run["sample_rate"] for run in load_ledger(plain)["runs"]}
    assert recorded == {q / UNDERSTATED_SAMPLE_RATE_FACTOR}
    ledger = plain / "target" / "ledger.json"
    payload = json.loads(ledger.read_text())
    for entry in payload["runs"]:
        entry["sample_rate"] = q / UNDERSTATED_SAMPLE_RATE_FACTOR
    ledger.write_text(json.dumps(payload))
    integrity.record_write(ledger)
    assert main(["epsilon", "--run", str(plain)]) == 2
    assert f"sample rate q = {q / UNDERSTATED_SAMPLE_RATE_FACTOR:g} where the run planned {q:g}" in error_line(capsys)


def test_an_interrupted_run_is_refused_wherever_it_is_read(tmp_path, monkeypatch, capsys):
    out = tmp_path / "cut"
    with monkeypatch.context() as patch:
        interrupt_at_save(patch, epoch=1, model_index=0)
        assert train(out, "--state-every", "0") == 130
    capsys.readouterr()
    for argv in (
        ["epsilon", "--run", str(out)],
        ["audit", "--run", str(out), "--attack", "loss", "--no-plot"],
        ["attack", "--run", str(out), "--quiet"],
    ):
        assert main(argv) == 2, argv
        assert "is an incomplete run" in error_line(capsys)
    with pytest.raises(DPAuditError, match="is an incomplete run"):
        summarize_run(out, attacks=("loss",))
    assert train(out, "--state-every", "0") == 0  # the same command finishes it
    assert main(["epsilon", "--run", str(out)]) == 0


# --- pooling -----------------------------------------------------------------------------------------------------


def test_pooling_the_same_run_twice_or_two_runs_of_one_seed_is_refused(run, tmp_path, capsys):
    assert main(["audit", "--run", str(run), str(run), "--attack", "canary", "--no-plot"]) == 2
    assert "is named twice" in error_line(capsys)
    twin = tmp_path / "twin"
    shutil.copytree(run, twin)
    assert main(["audit", "--run", str(run), str(twin), "--attack", "canary", "--no-plot"]) == 2
    assert "same seed and trial (0, 0)" in error_line(capsys)
    other = tmp_path / "trial1"
    assert train(other, "--canaries", "20", "--trial", "1") == 0
    assert main(["audit", "--run", str(run), str(other), "--attack", "canary", "--no-plot"]) == 0


def test_check_distinct_runs_refuses_one_folder_by_two_names(tmp_path):
    (tmp_path / "a").mkdir()
    config = {"seed": 0, "trial": 0}
    with pytest.raises(DPAuditError, match="named twice"):
        integrity.check_distinct_runs([tmp_path / "a", tmp_path / "a" / ".." / "a"], configs=[config, config])
    integrity.check_distinct_runs([tmp_path / "a", tmp_path / "b"], configs=[config, {"seed": 0, "trial": 1}])


# --- resources, permissions, one line ---------------------------------------------------------------------------


def test_a_canary_count_beyond_the_machines_memory_is_refused_before_any_work(tmp_path, capsys):
    from dpaudit.config import TrainConfig
    from dpaudit.train import check_memory

    config = TrainConfig.from_dict(
        dict(dataset="digits", optimizer="dpsgd-gc", noise_multiplier=1.0, clip_norm=1.0, canaries=10**6)
    ).validated()
    # 10⁶ Dirac canaries, b = 50 (records per call ≤ 2·min(256, 100) = 200): 4 bytes × 10⁶ × (200 + 12) = 0.79 GiB
    check_memory(config, available=2**30)
    with pytest.raises(DPAuditError, match=r"canaries = 1000000 needs about 0.79 GiB"):
        check_memory(config, available=2**29)
    assert train(tmp_path / "big", "--canaries", str(10**12)) == 2
    assert "canaries = 1000000000000 needs about" in error_line(capsys)
    assert not (tmp_path / "big").exists()


def test_more_shadow_models_than_memory_holds_are_refused_before_any_work():
    from dpaudit.config import TrainConfig
    from dpaudit.train import check_memory

    config = TrainConfig.from_dict(
        dict(dataset="digits", optimizer="dpsgd-gc", noise_multiplier=1.0, clip_norm=1.0)
    ).validated()
    config = config.replaced(num_shadows=999)
    # cnn-digits on 1×8×8: conv 1·16·9 + 16, conv 16·32·9 + 32, linear 512·10 + 10 = 9,930 parameters;
    # 1,000 models × 9,930 × 12 copies × 4 bytes = 476,640,000 bytes = 0.444 GiB
    check_memory(config, available=2**29)
    with pytest.raises(DPAuditError, match=r"num_shadows = 999 needs about 0.444 GiB .*1000×9930 parameters"):
        check_memory(config, available=2**28)


def test_written_files_have_the_permissions_of_the_users_other_files(tmp_path):
    from dpaudit._io import write_json

    old = os.umask(0o022)
    try:
        path = write_json(tmp_path / "out.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~0o022


def test_a_missing_or_malformed_config_file_is_one_line(tmp_path, capsys):
    assert train(tmp_path / "r", "--config", str(tmp_path / "missing.yaml")) == 2
    assert "missing.yaml: No such file or directory" in error_line(capsys)
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr: [0.1\n")
    assert train(tmp_path / "r", "--config", str(bad)) == 2
    assert "is not a YAML file" in error_line(capsys)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("lr: 0.1 # café\n".encode("latin-1"))
    assert train(tmp_path / "r", "--config", str(latin)) == 2
    assert "is not a YAML file" in error_line(capsys)


def test_a_config_json_of_the_wrong_shape_is_one_line(run, capsys):
    (run / "config.json").write_text("[]")
    integrity.record_write(run / "config.json")
    assert main(["audit", "--run", str(run), "--attack", "canary", "--no-plot"]) == 2
    assert "is not a dpaudit run's configuration" in error_line(capsys)


def test_a_full_disk_is_one_line(run, monkeypatch, capsys):
    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert main(["epsilon", "--run", str(run)]) == 2
    assert error_line(capsys) == f"dpaudit: error: {run / 'target' / 'epsilon.json'}: No space left on device"


def test_a_bug_keeps_its_traceback_and_says_where_to_report_it(monkeypatch, capsys):
    import dpaudit.cli.commands as commands

    def broken(args):
        raise RuntimeError("an index went wrong")

    monkeypatch.setattr(commands, "_cmd_list", broken)
    assert main(["list", "optim"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: an index went wrong" in err
    assert "this is a bug in dpaudit" in err.strip().splitlines()[-1]


def test_os_errors_name_the_file():
    from dpaudit.cli import user_error

    assert user_error(PermissionError(13, "Permission denied", "/x/run")) == "/x/run: Permission denied"
    assert user_error(IsADirectoryError(21, "Is a directory", "scores.csv")) == "scores.csv: Is a directory"
    assert "not UTF-8" in user_error(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"))
    assert user_error(ValueError("x")) is None and user_error(np.linalg.LinAlgError("x")) is None
