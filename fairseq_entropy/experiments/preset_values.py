"""The values of a training preset (:mod:`.presets`): the keys' types and ranges, the
options that ``train-args`` derives from keys (which a list key may not give again), and the
``epochs_formula`` evaluator.  :func:`check_preset_values` runs when a presets file is loaded,
so that a bad value is refused then, not when a run starts."""

from __future__ import annotations

import ast
import math
import operator

from ..errors import UserError

LIST_KEYS = ("optimizer_args", "task_args", "model_args", "criterion_args", "extra_args")
#: fairseq-train options that :func:`train_args` derives from a preset's keys, and the fix
#: for a list key that gives one of them again
FIELD_OPTIONS = {"--arch": "set the preset's key 'arch' instead",
                 "--batch-size": "set the preset's key 'batch_size' instead",
                 "--lr": "set the preset's key 'lr' instead",
                 "--max-update": "set the preset's key 'epochs' instead (or pass a run's "
                                 "--max-update)",
                 "--required-batch-size-multiple": "drop it (train-args always gives 1)"}
#: keys a preset may hold: list-valued argument groups, scalars, and bookkeeping
KNOWN_KEYS = frozenset(LIST_KEYS) | {
    "model", "arch", "experiment", "format", "batch_size", "epochs", "epochs_by_train_size",
    "epochs_formula", "lr", "warmup_fraction", "min_lr_ratio", "notes", "extends"}
#: the task arguments of each data format (``binarize --format``; a preset's ``format``,
#: default ``pairs``): the systematicity task on pairs, systematicity_lm on lm lines
TASK_ARGS = {"pairs": ("--task", "systematicity", "--source-lang", "in", "--target-lang", "out"),
             "lm": ("--task", "systematicity_lm")}
#: the most updates a schedule may ask for (``max_update`` of a grid, ``--max-update``)
MAX_UPDATE_LIMIT = 10 ** 9
#: the most epochs a schedule may ask for (a preset's, a grid's, ``--epochs``)
MAX_EPOCHS = 10 ** 5


class PresetError(UserError, ValueError):
    """Unknown preset or an unusable preset file."""


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


#: scalar keys of a preset -> (test, the valid values in words)
VALUE_CHECKS = {
    "batch_size": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
                   "a positive integer"),
    "epochs": (lambda v: _number(v) and 0 < v <= MAX_EPOCHS,
               f"a positive number <= {MAX_EPOCHS} (MAX_EPOCHS)"),
    "lr": (lambda v: _number(v) and v > 0, "a positive number"),
    "warmup_fraction": (lambda v: _number(v) and 0 <= v < 1, "a number in [0, 1)"),
    "min_lr_ratio": (lambda v: _number(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "model": (lambda v: isinstance(v, str) and v != "", "a name"),
    "arch": (lambda v: isinstance(v, str) and v != "", "a fairseq architecture name"),
    "experiment": (lambda v: v in ("exp1", "exp2", "scan", "cogs"), "exp1, exp2, scan or cogs"),
    "format": (lambda v: v in TASK_ARGS, "pairs or lm (the data format the model reads)"),
    "notes": (lambda v: isinstance(v, str), "text"),
    "epochs_formula": (lambda v: isinstance(v, str), "a formula in k, e.g. \"64-8*(k-1)\""),
    "epochs_by_train_size": (
        lambda v: isinstance(v, dict) and all(
            str(k).isdigit() and int(k) > 0 and _number(e) and 0 < e <= MAX_EPOCHS
            for k, e in v.items()),
        f"an object mapping training sizes to positive epochs <= {MAX_EPOCHS} (MAX_EPOCHS), "
        "e.g. {\"6000\": 24}"),
}


def check_preset_values(name: str, preset: dict, where: str) -> None:
    """Check every value of the flat ``preset`` against its type and valid range, so that a
    bad value is refused when the presets are loaded, not when a run starts.

    Args:
        name: the preset's name.
        preset: the preset after ``extends`` (:func:`expand_presets`).
        where: ``file:line`` of the preset, for the message.

    Raises:
        PresetError: ``file:line: preset NAME: key KEY = VALUE`` with the valid values and the
            fix (a list key that is not a list of text, a non-positive ``batch_size``,
            ``epochs`` or ``lr``, fractions outside their range, an ``experiment`` other than
            exp1/exp2/scan/cogs, or an ``epochs_formula`` that is not a formula in k giving positive
            epochs for k = 1..8).
    """
    def fail(key, value, valid):
        return PresetError(f"{where}: preset {name!r}: key {key!r} = {value!r}, but it must be "
                           f"{valid}. Fix: correct {key!r} in the presets file")

    for key in LIST_KEYS:
        if key in preset and not (isinstance(preset[key], list) and all(
                isinstance(a, str) for a in preset[key])):
            raise fail(key, preset[key], "a list of text arguments")
    for key, (ok, valid) in VALUE_CHECKS.items():
        if key in preset and not ok(preset[key]):
            raise fail(key, preset[key], valid)
    # an option that train-args derives from a key, given again in a list, reaches
    # fairseq-train twice and fairseq keeps the last one: the key (e.g. lr, which train-args
    # --field reports, or the schedule's --max-update) would be overridden silently.  Within
    # the lists, a later value overriding an inherited one ("model_args+") is the idiom.
    owned = {**FIELD_OPTIONS, **{o: "drop it (the task's arguments give it)"
                                 for o in TASK_ARGS[preset.get("format", "pairs")]
                                 if o.startswith("--")}}
    for key in LIST_KEYS:
        for option in preset.get(key, []):
            if option in owned:
                raise PresetError(
                    f"{where}: preset {name!r}: {key} gives {option}, which train-args "
                    "derives from the preset itself (fairseq-train would keep the last one "
                    f"and drop the other silently). Fix: {owned[option]}")
    if "epochs_formula" in preset:
        valid = ("a formula in k (+ - * // and parentheses) giving positive epochs <= "
                 f"{MAX_EPOCHS} (MAX_EPOCHS) for k = 1..8")
        try:
            if any(not 0 < eval_epochs(preset["epochs_formula"], k) <= MAX_EPOCHS
                   for k in range(1, 9)):
                raise fail("epochs_formula", preset["epochs_formula"], valid)
        except (PresetError, SyntaxError, ZeroDivisionError):
            raise fail("epochs_formula", preset["epochs_formula"], valid) from None


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv}


def eval_epochs(formula: str, k: int) -> int:
    """Evaluate an integer formula in ``k`` (only + - * // and parentheses)."""
    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id == "k":
            return k
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise PresetError(f"unsupported epochs formula {formula!r}")
    return int(ev(ast.parse(formula, mode="eval")))
