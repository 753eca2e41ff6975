"""The cross-optimizer audit figures and table from `dpaudit audit` results."""

from __future__ import annotations

import numpy as np

from dpaudit._io import read_json, write_json
from dpaudit.audit import audit_scores
from dpaudit.cli import main


def _audit_file(folder, attack, shift, theory):
    rng = np.random.default_rng(int(10 * shift))
    report = audit_scores(rng.normal(shift, 1, 400), rng.normal(0, 1, 400))
    key = "epsilon_mechanism" if attack == "canary" else "epsilon_run"
    path = folder / f"audit_{attack}.json"
    write_json(path, {"attack": attack, key: theory, "report": report.to_dict()})
    return path


def test_audit_table_draws_lower_bounds_and_rocs(tmp_path, capsys):
    files = []
    for name, strength in (("dpsgd-gc", 1.0), ("tp-topk", 0.5)):
        for eps in (1, 4, 8):
            folder = tmp_path / "results" / f"{name}_eps{eps}"
            folder.mkdir(parents=True)
            files += [_audit_file(folder, "canary", strength * eps / 2, eps / 2),
                      _audit_file(folder, "loss", strength * 0.1, eps)]
    out = tmp_path / "figures"
    assert main(["audit-table", *map(str, files), "--metrics", str(tmp_path / "m.json"), "--markdown",
                 str(tmp_path / "m.md"), "--figures", str(out), "--title", "test", "--roc-epsilon", "5"]) == 0
    for stem in ("lower_bounds", "roc_canary", "roc_loss"):
        for suffix in (".pdf", ".png"):
            assert (out / (stem + suffix)).stat().st_size > 1000
    metrics = read_json(tmp_path / "m.json")
    assert set(metrics) == {f"{n}_eps{e}/{a}" for n in ("dpsgd-gc", "tp-topk") for e in (1, 4, 8)
                            for a in ("canary", "loss")}
    # the stronger canary separation certifies more, and theory is the mechanism's ε for canaries
    assert metrics["dpsgd-gc_eps8/canary"]["epsilon_lower"] > metrics["tp-topk_eps8/canary"]["epsilon_lower"]
    assert metrics["dpsgd-gc_eps8/canary"]["epsilon_theory"] == 4.0
    assert "| dpsgd-gc_eps8 | canary |" in capsys.readouterr().out
