"""The ``dpaudit`` parser: the library's commands under their heading (the pipeline's are ``python -m reproduce``'s),
every command parsed."""

from __future__ import annotations

import pytest

from dpaudit.cli import COMMAND_GROUPS, build_parser, main


def _sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  ") and not line.startswith("   "):
            current.append(line.split()[0])
    return sections


def test_help_lists_the_library_commands_and_no_pipeline_command():
    parser = build_parser()
    sections = _sections(parser.format_help())
    assert sections["commands"] == [
        "train",
        "audit",
        "blackbox",
        "attack",
        "theory",
        "epsilon",
        "calibrate",
        "list",
        "data",
    ]
    assert "pipeline commands" not in sections
    commands = next(action for action in parser._actions if action.dest == "command").choices
    assert sorted(name for _, names in COMMAND_GROUPS for name in names) == sorted(commands)


@pytest.mark.parametrize("name", [name for _, names in COMMAND_GROUPS for name in names])
def test_every_command_has_its_handler(name):
    commands = next(action for action in build_parser()._actions if action.dest == "command").choices
    assert callable(commands[name].get_default("handler"))


# `dpaudit train`'s flags before they were grouped: every one stays, under the same name.
TRAIN_FLAGS = (
    "--out --config --quiet --summarize --overwrite --restart --state-every --dataset --model --optimizer --epochs "
    "--batch-size --lr --clip-norm --sigma-dp --noise-multiplier --domain-radius --domain-center --target-epsilon "
    "--delta --accountant --momentum --r --gamma --noise-decay-exponent --noise-decay-unit --reduction-rate "
    "--reduction-convention --projection-refresh --active-ratio --warmup-fraction --warmup-budget-fraction "
    "--warmup-sigma-dp --pretrain-fraction --retention-ratio --example-topk-fraction --ema-mean-decay "
    "--ema-variance-decay --standardise-constant --diagnostics --histogram-epoch --canaries --canary-design "
    "--canary-randomness --canary-support --sampling --eval-epochs --target-size --num-shadows --shadow-size "
    "--split-design --trial --seed --data-root --download --microbatch-size --grad-sample --engine --memory-budget-mb "
    "--device"
).split()


def _train_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    return capsys.readouterr().out


def _flag_sections(text: str) -> dict[str, list[str]]:
    """Heading → the flags listed under it, in order."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  --"):
            current.append(line.split()[0].rstrip(","))
    return sections


def test_train_flags_are_grouped_by_family_with_help_from_the_declarations(capsys):
    text = _train_help(capsys)
    sections = _flag_sections(text)
    assert list(sections) == [
        "options",
        "data",
        "model",
        "optimizer",
        "optimizer settings: DomainSettings",
        "optimizer settings: PSACSettings",
        "optimizer settings: AutomaticClippingSettings",
        "optimizer settings: DynamicNoiseSettings",
        "optimizer settings: ProjectionSettings",
        "optimizer settings: SparseSettings",
        "optimizer settings: TwoPhaseSettings",
        "optimizer settings: ImportanceMaskSettings",
        "optimizer settings: AdaDPIGUSettings",
        "privacy",
        "audit",
        "engine",
        "trial",
        "run folder",
        "example (target + 3 shadows, the DPSGD-GC/DC paper's σ_DP and C, on digits)",
    ]
    assert sections["optimizer"] == ["--optimizer", "--epochs", "--batch-size", "--sampling", "--lr", "--momentum"]
    assert sections["privacy"] == [
        "--clip-norm",
        "--sigma-dp",
        "--noise-multiplier",
        "--target-epsilon",
        "--delta",
        "--accountant",
    ]
    assert sections["optimizer settings: TwoPhaseSettings"] == [
        "--warmup-fraction",
        "--warmup-budget-fraction",
        "--warmup-sigma-dp",
    ]
    assert sections["engine"] == ["--microbatch-size", "--grad-sample", "--engine", "--memory-budget-mb", "--device"]
    listed = [flag for flags in sections.values() for flag in flags]
    assert sorted(listed) == sorted(TRAIN_FLAGS) and len(listed) == len(set(listed))
    # the help is the declarations', not docstring text: plain words, nothing of a docstring's markup
    assert "--batch-size BATCH_SIZE\n                        (expected) batch size b (default: 50)\n" in text
    for markup in ("``", ":data:", ":class:", ":func:", "inserted here"):
        assert markup not in text


def test_train_flags_offer_the_registries_names_without_loading_torch(capsys):
    from dpaudit import _names, models, optim

    assert sorted(_names.BUILTIN_OPTIMIZERS) == optim.available()
    assert sorted(_names.BUILTIN_MODELS) == models.available()
    commands = next(action for action in build_parser()._actions if action.dest == "command").choices
    choices = {action.dest: action.choices for action in commands["train"]._actions}
    assert choices["optimizer"] == optim.available() and choices["model"] == models.available()
    assert choices["dataset"][0] == "digits" and "cifar10" in choices["dataset"]
    assert choices["sampling"] == ("poisson", "shuffle") and choices["noise_decay_unit"] == ("epoch", "step")
    text = _train_help(capsys)
    assert "one of: adadpigu, adadpigu-code, adadpigu-freeze, auto-s," in " ".join(text.split())
