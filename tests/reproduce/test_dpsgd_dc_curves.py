"""Known-answer tests of the DPSGD-GC/DC paper's Figs. 2b and 3b as the reproduction draws them
(reproduce.dpsgd_dc_curves). Golden values are from the paper's figures and from first principles."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit._validation import DPAuditError
from dpaudit.theory import bound_parameters, dc_cap, rdp_bound
from reproduce.dpsgd_dc_curves import fig2b_curves, fig3b_curves, normalize_global

REL = 1e-6
# Experimental parameters (Figs 2/3).
EXP = dict(alpha=1.1, L=0.1, C=20.0, sigma=0.002, n=10000, eta=0.1)


def params_for(name, pool):
    return {k: pool[k] for k in bound_parameters(name)}


def tol_from_text(text: str) -> tuple[float, float]:
    """Value and half-unit-in-the-last-place tolerance of a number as printed in the spec."""
    mantissa = text.split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    scale = 10 ** int(text.split("e")[1]) if "e" in text else 1
    return float(text), 0.5 * 10 ** (-decimals) * scale * (1 + 1e-9)


# ---------------------------------------------------------------------------------------------
# Figure 2b
# ---------------------------------------------------------------------------------------------

FIG2B_TABLE = {  # b: (E=100, E=200, E=400), as printed in the spec
    100: ("0.25", "0.5", "1.0"),
    200: ("0.0625", "0.125", "0.25"),
    300: ("0.02778", "0.05556", "0.1111"),
    400: ("0.01563", "0.03125", "0.0625"),
    600: ("0.00694", "0.01389", "0.02778"),
    1000: ("0.0025", "0.005", "0.01"),
}


def test_fig2b_normalized_table():
    curves = fig2b_curves()
    assert set(curves) == {100, 200, 300, 400, 600, 1000}
    for b, row in FIG2B_TABLE.items():
        assert curves[b].shape == (401,)
        assert curves[b][0] == 0.0
        for E, text in zip((100, 200, 400), row):
            value, tol = tol_from_text(text)
            assert curves[b][E] == pytest.approx(value, abs=tol), (b, E)
            assert curves[b][E] == pytest.approx((100 / b) ** 2 * E / 400, rel=1e-9)  # exact closed form
    assert max(float(c.max()) for c in curves.values()) == 1.0
    # Ordering 100 > 200 > ... > 1000 at every E > 0.
    stacked = np.stack([curves[b][1:] for b in (100, 200, 300, 400, 600, 1000)])
    assert np.all(np.diff(stacked, axis=0) < 0)


def test_fig2b_ceil_mode():
    curves = fig2b_curves(step_mode="ceil")
    assert curves[300][400] == pytest.approx(0.1133, abs=5e-5)
    assert curves[600][400] == pytest.approx(0.02833, abs=5e-6)
    for b, row in FIG2B_TABLE.items():
        if b in (300, 600):
            continue
        assert curves[b][400] == pytest.approx(float(row[2]), rel=1e-9)


def test_fig2b_unnormalized():
    curves = fig2b_curves(normalize=False)
    per_epoch = {100: "22000", 200: "5500", 300: "2444.4", 400: "1375", 600: "611.1", 1000: "220"}
    for b, text in per_epoch.items():
        value, tol = tol_from_text(text)
        assert curves[b][1] == pytest.approx(value, abs=max(tol, value * 1e-6))
    assert curves[100][400] == pytest.approx(8.8e6, rel=REL)


# ---------------------------------------------------------------------------------------------
# Figure 3b
# ---------------------------------------------------------------------------------------------

FIG3B_TABLE = {  # (b, label): (cap, normalised plateau, saturation epoch)
    (100, 20): ("633520.8", "0.4624", 72),
    (100, 60): ("966680.7", "0.7056", 110),
    (100, 100): ("1369972.5", "1.0000", 156),
    (400, 20): ("596737.9", "0.4356", 272),
    (400, 60): ("921114.6", "0.6724", 419),
    (400, 100): ("1315623.1", "0.9603", 599),
}


def test_fig3b_schematic_table():
    raw = fig3b_curves(normalize=False)
    norm = fig3b_curves()
    assert set(raw) == set(FIG3B_TABLE)
    for key, (cap_text, plateau_text, sat_epoch) in FIG3B_TABLE.items():
        assert raw[key].shape == (1001,)
        cap, cap_tol = tol_from_text(cap_text)
        assert raw[key].max() == pytest.approx(cap, abs=cap_tol), key
        plateau, plateau_tol = tol_from_text(plateau_text)
        assert norm[key][-1] == pytest.approx(plateau, abs=plateau_tol), key
        first = int(np.flatnonzero(raw[key] >= raw[key].max())[0])
        assert first == sat_epoch, key
    assert max(float(c.max()) for c in norm.values()) == 1.0


def test_fig3b_schematic_slopes():
    norm = fig3b_curves()
    for D in (20, 60, 100):
        assert norm[(100, D)][1] == pytest.approx(0.0064235, abs=5e-8)
        assert norm[(400, D)][1] == pytest.approx(0.0016059, abs=5e-8)
        assert norm[(100, D)][50] == pytest.approx(0.3212, abs=5e-5)


def test_fig3b_faithful_never_saturates():
    raw = fig3b_curves(mode="faithful", normalize=False)
    norm = fig3b_curves(mode="faithful")
    E = np.arange(0, 1001)
    for b in (100, 400):
        curves = [raw[(b, D)] for D in (20, 60, 100)]
        for c in curves[1:]:
            np.testing.assert_array_equal(c, curves[0])
        # Straight line = Theorem 3.3 (no cap binds within 1000 epochs).
        linear = rdp_bound("dpsgd-gc", E * 10000 / b, **params_for("dpsgd-gc", dict(EXP, b=b)))
        np.testing.assert_allclose(curves[0], linear, rtol=1e-12)
    assert norm[(100, 20)][-1] == 1.0
    # Caps and saturation epochs with the real parameters (spec: 5.6e9 / 5.05e10 / 1.40e11).
    for D, text in ((20, "5.6e9"), (60, "5.05e10"), (100, "1.40e11")):
        value, tol = tol_from_text(text)
        for b in (100, 400):
            cap = dc_cap(**params_for("dpsgd-dc", dict(EXP, b=b, D=float(D))))
            assert cap.cap == pytest.approx(value, abs=tol), (b, D)
            assert cap.t_sat * b / 10000 > 1000
    low = dc_cap(**params_for("dpsgd-dc", dict(EXP, b=100, D=20.0)))
    assert low.t_sat * 100 / 10000 == pytest.approx(2.6e5, abs=0.05e5)
    high = dc_cap(**params_for("dpsgd-dc", dict(EXP, b=400, D=100.0)))
    assert high.t_sat * 400 / 10000 == pytest.approx(1e8, abs=0.05e8)


def test_fig3b_bad_mode_and_labels():
    with pytest.raises(DPAuditError, match="paper_schematic"):
        fig3b_curves(mode="bogus")
    with pytest.raises(DPAuditError, match="schematic_D"):
        fig3b_curves(domain_sizes=(10,))
    custom = fig3b_curves(domain_sizes=(10,), schematic_D=(2.0,), normalize=False)
    assert custom[(100, 10)].max() == pytest.approx(633520.8, abs=0.05)


def test_normalize_global():
    out = normalize_global({"a": [0.0, 1.0, 2.0], "b": np.array([4.0, 1.0])})
    np.testing.assert_allclose(out["a"], [0.0, 0.25, 0.5])
    np.testing.assert_allclose(out["b"], [1.0, 0.25])
    with pytest.raises(DPAuditError):
        normalize_global({})
    with pytest.raises(DPAuditError):
        normalize_global({"a": [0.0, 0.0]})
