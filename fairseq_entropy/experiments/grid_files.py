"""Reading a grid file and checking its values (:mod:`.grids` turns them into cells): the
TOML or JSON text, the line of a key for error messages, the range of every value, the keys
of a COGS grid (:func:`cogs_keys`) and the ``[resources]`` keys."""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path
from typing import List, Tuple

from ..cogs.data import CASE_TYPES, LEXICAL
from ..errors import DataFormatError, UserError
from ..files import loads_json, read_text
from ..scan.entropy import COMPONENT_VALUES
from ..scan.grammar import PAPER_VERBS
from ..scan.levels import level_name, named_exactly
from .preset_values import MAX_EPOCHS, MAX_UPDATE_LIMIT

EXPERIMENTS = ("exp1", "exp2", "cogs")
#: the keys of a COGS grid only (:func:`cogs_keys`)
COGS_KEYS = ("cogs_dir", "case", "cases")


class GridError(UserError, ValueError):
    """An unreadable or inconsistent grid file."""


def read_grid(path: Path) -> Tuple[dict, str]:
    """The grid's keys and its text (read by :func:`~fairseq_entropy.files.read_text`, so a
    byte-order mark and CRLF line ends are accepted)."""
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise GridError(f"{path}: the grid file {what}. Fix: pass a .toml or .json file, e.g. "
                        "one from recipes/grids/")
    if path.suffix not in (".toml", ".json"):
        raise GridError(f"{path}: a grid file is read by its name's suffix, .toml or .json, "
                        f"not {path.suffix or 'none'!r}. Fix: rename it to .toml (TOML) or "
                        ".json (JSON)")
    try:
        text = read_text(path)
    except DataFormatError as e:
        raise GridError(str(e)) from None
    except OSError as e:
        raise GridError(f"{path}: cannot read the grid file ({e.strerror}). Fix: pass a file "
                        "from recipes/grids/") from None
    if path.suffix == ".json":
        try:
            return loads_json(text, path), text
        except DataFormatError as e:  # a repeated key
            raise GridError(str(e)) from None
        except json.JSONDecodeError as e:
            raise GridError(f"{path}:{e.lineno}: invalid JSON ({e.msg}). Fix: correct the "
                            "line") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as e:
        where = re.search(r"\(at line (\d+), column \d+\)", str(e))
        line = f":{where.group(1)}" if where else ""
        raise GridError(f"{path}{line}: invalid TOML ({e}). Fix: correct that line") from None


def key_line(text: str, key: str) -> int:
    """1-based line where ``key`` is set in a grid's TOML or JSON ``text`` (1 if not found)."""
    m = re.search(rf'^\s*(?:{re.escape(key)}|"{re.escape(key)}")\s*[=:]', text, re.M) or \
        re.search(rf'^\s*\[{re.escape(key)}\]', text, re.M) or \
        re.search(rf'"{re.escape(key)}"\s*:', text)
    return text.count("\n", 0, m.start()) + 1 if m else 1


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_values(raw: dict, text: str, path: Path) -> None:
    """Check every value of a grid's keys against its type and valid range, so that a bad
    value is refused when the grid is loaded (``sweep --dry-run`` included), not when a cell
    runs.

    Checked: ``experiment``; ``levels`` (Experiment 1: entropies in [0, log2 of the number of
    values of the controlled class] bits, 3 for the paper's 8 verbs; Experiment 2: support
    sizes k, integers in 1..number of verbs; COGS: entropies >= 0 bits, with at most 3
    decimals, whose reach ``build cogs`` checks on the data); ``seeds`` (integers in
    0..2**32-1); ``n`` (positive integers); ``presets`` (names); ``schedule``
    (``"paper"``, ``epochs`` in (0, MAX_EPOCHS] or an integer ``max_update`` in
    1..MAX_UPDATE_LIMIT); ``pack`` (an integer >= 0); ``title`` and ``notes`` (text).
    Lists must be non-empty and hold each value once.

    Raises:
        GridError: ``path:line: key ...`` naming the value, the valid range and the fix.
    """
    def fail(key: str, msg: str) -> GridError:
        return GridError(f"{path}:{key_line(text, key)}: {key} {msg}")

    exp = raw["experiment"]
    if exp not in EXPERIMENTS:
        raise fail("experiment", f"= {exp!r}. Fix: use one of {', '.join(EXPERIMENTS)}")
    build_args = raw.get("build_args", [])
    opts = dict(zip(build_args[::2], build_args[1::2])) if isinstance(build_args, list) else {}
    verbs = [v for v in str(opts.get("--verbs", "")).split(",") if v.strip()] or PAPER_VERBS
    component = opts.get("--component", "verb")
    n_values = len(COMPONENT_VALUES.get(component, verbs)) if component != "verb" \
        else len(verbs)

    def number_list(key, integer, low, high, what):
        value = raw.get(key)
        if not isinstance(value, list) or not value:
            raise fail(key, f"must be a non-empty list of {what}, got {value!r}. Fix: e.g. "
                            f"{key} = [{low}, {high if high is not None else low + 1}]")
        for v in value:
            if not _is_number(v) or (integer and float(v) != int(v)) or v < low or \
                    (high is not None and v > high):
                rng = f"{low}..{high}" if high is not None else f">= {low}"
                raise fail(key, f"holds {v!r}, but must hold {what} in {rng}. Fix: correct or "
                                "remove that value")
        if len(set(value)) != len(value):
            raise fail(key, f"repeats a value: {value!r}. Fix: list each value once")

    if exp in ("exp1", "cogs"):
        # the largest level with 3 decimals (a level's name has 3) that can be built
        h_max = math.floor(math.log2(n_values) * 1e3 + 1e-9) / 1e3 if exp == "exp1" else None
        number_list("levels", False, 0, h_max,
                    f"entropies in bits (the {component} class has {n_values} values, so at "
                    f"most log2({n_values}) bits)" if exp == "exp1" else
                    "entropies in bits of the case's tested slot")
        for v in raw["levels"]:
            if not named_exactly("exp1", v):
                raise fail("levels", f"holds {v!r}, which has more than 3 decimals, but a "
                                     f"level is named by its target with 3 "
                                     f"({level_name('exp1', v)}), which would misstate it and "
                                     "could hold another level too. Fix: round it to 3 "
                                     f"decimals ({round(v, 3):g})")
    else:
        number_list("levels", True, 1, len(verbs),
                    f"support sizes k (integers; {len(verbs)} verbs)")
    number_list("seeds", True, 0, 2 ** 32 - 1, "integer seeds")
    if "n" in raw:
        number_list("n", True, 1, None, "positive integers (training commands)")
    names = raw["presets"]
    if not isinstance(names, list) or not names or not all(
            isinstance(p, str) and p for p in names):
        raise fail("presets", f"must be a non-empty list of preset names, got {names!r}. Fix: "
                              "e.g. presets = [\"exp1_cnn_authors\"]")
    if len(set(names)) != len(names):
        raise fail("presets", f"repeats a name: {names!r}. Fix: list each preset once")
    sched = raw.get("schedule", "paper")
    if sched != "paper":
        ok = isinstance(sched, dict) and len(sched) == 1 and (
            ("epochs" in sched and _is_number(sched["epochs"])
             and 0 < sched["epochs"] <= MAX_EPOCHS) or
            ("max_update" in sched and _is_number(sched["max_update"])
             and not isinstance(sched["max_update"], float)
             and 0 < sched["max_update"] <= MAX_UPDATE_LIMIT))
        if not ok:
            raise fail("schedule", f"= {sched!r}. Fix: \"paper\" (the presets' schedules), "
                                   f"{{epochs = E}} with 0 < E <= {MAX_EPOCHS} or "
                                   f"{{max_update = U}} with an integer 0 < U <= "
                                   f"{MAX_UPDATE_LIMIT}")
    pack = raw.get("pack", 0)
    if not _is_number(pack) or isinstance(pack, float) or pack < 0:
        raise fail("pack", f"= {pack!r}. Fix: an integer >= 0: the most cells one fairseq-train "
                           "trains together (0 or 1: every cell on its own)")
    for key in ("title", "notes"):
        if key in raw and not isinstance(raw[key], str):
            raise fail(key, f"must be text, got {raw[key]!r}. Fix: quote it")


def cogs_keys(raw: dict, text: str, path: Path) -> Tuple[str | None, List[str | None]]:
    """The COGS source directory and the cases of a grid (``cogs_dir``, and ``case`` or
    ``cases``: :data:`COGS_KEYS`), checked.

    ``cogs_dir`` is relative to the grid file's folder (or absolute) and must hold COGS's
    ``train.tsv``, ``dev.tsv`` and ``gen.tsv`` (:func:`~fairseq_entropy.cogs.builder.
    SOURCE_FILES`); each case must be one of COGS's lexical cases
    (:data:`~fairseq_entropy.cogs.data.CASE_TYPES`).  A COGS grid takes no ``n`` (a level's
    size follows from its build), ``build_args``, ``data`` or ``pack`` above 1 (its levels'
    dictionaries differ, and packed runs share one).

    Returns:
        ``(absolute cogs_dir, [case, ...])`` for ``experiment = "cogs"``; ``(None, [None])``
        for the other experiments.

    Raises:
        GridError: ``path:line: ...`` naming the key, the value and the fix: a COGS key in a
            grid of another experiment, a missing ``cogs_dir`` or case, both ``case`` and
            ``cases``, a value of the wrong type, a repeated, unknown or structural case, a
            directory without COGS's files, or a key a COGS grid does not take.
    """
    from ..cogs.builder import SOURCE_FILES

    def fail(key: str | None, msg: str) -> GridError:
        return GridError(f"{path}:{key_line(text, key) if key else 1}: {msg}")

    if raw["experiment"] != "cogs":
        given = [k for k in COGS_KEYS if k in raw]
        if given:
            raise fail(given[0], f"{given[0]} is a key of COGS grids, but the grid is of "
                                 f"{raw['experiment']}. Fix: remove it, or set experiment = "
                                 "\"cogs\"")
        return None, [None]
    for key, why in (("n", "a COGS level's size follows from its build"),
                     ("build_args", "the sweep sets every option of build cogs"),
                     ("data", "the sweep builds a COGS grid's levels from cogs_dir")):
        if key in raw:
            raise fail(key, f"{key} is given, but {why}. Fix: remove {key}")
    if raw.get("pack", 0) not in (0, 1):
        raise fail("pack", f"pack = {raw['pack']!r}, but the levels of a COGS case have "
                           "dictionaries of their own (build cogs drops words from training) "
                           "and packed runs share one. Fix: pack = 0 (or remove it)")
    lexical = ", ".join(c for c, t in CASE_TYPES.items() if t == LEXICAL)
    if ("case" in raw) == ("cases" in raw):
        raise fail("cases" if "cases" in raw else None,
                   ("both case and cases are given" if "case" in raw else "missing key "
                    "'case' (or 'cases')") + f". Fix: case = \"subj_to_obj_common\", or "
                   f"cases = [...] with lexical cases of COGS: {lexical}")
    key = "case" if "case" in raw else "cases"
    cases = [raw["case"]] if key == "case" else raw["cases"]
    if not isinstance(cases, list) or not cases or \
            not all(isinstance(c, str) and c for c in cases):
        raise fail(key, f"{key} = {raw[key]!r}. Fix: " + (
            "a case name, e.g. case = \"subj_to_obj_common\"" if key == "case" else
            "a non-empty list of case names, e.g. cases = [\"subj_to_obj_common\", "
            "\"prim_to_obj_proper\"]"))
    if len(set(cases)) != len(cases):
        raise fail(key, f"{key} repeats a case: {cases!r}. Fix: list each case once")
    for c in cases:
        if c not in CASE_TYPES or CASE_TYPES[c] != LEXICAL:
            what = "is not a COGS generalization case" if c not in CASE_TYPES else \
                "is a structural case, which holds no (word, slot) pair out of training"
            raise fail(key, f"{key}: {c!r} {what}. Fix: choose lexical cases of COGS "
                            f"(build cogs controls the slot of a held-out word): {lexical}")
    value = raw.get("cogs_dir")
    if value is None:
        raise fail(None, "missing key 'cogs_dir'. Fix: cogs_dir = \"path/to/COGS/data\", the "
                         "folder of COGS's train.tsv, dev.tsv, test.tsv and gen.tsv (relative "
                         "to the grid file, or absolute)")
    if not isinstance(value, str) or not value:
        raise fail("cogs_dir", f"cogs_dir = {value!r}. Fix: a path (relative to the grid "
                               "file), e.g. cogs_dir = \"COGS/data\"")
    where = path.parent / value
    missing = [f"{stem}.tsv" for stem, needed in SOURCE_FILES.items()
               if needed and not (where / f"{stem}.tsv").is_file()]
    if missing:
        what = "is not a directory" if not where.is_dir() else f"has no {', '.join(missing)}"
        raise fail("cogs_dir", f"cogs_dir = {value!r}: {where} {what}. Fix: set cogs_dir to "
                               "the folder of COGS's train.tsv, dev.tsv, test.tsv and gen.tsv "
                               "(the data/ folder of github.com/najoungkim/COGS, or the "
                               "variable_free/ folder of github.com/frankaging/ReCOGS), "
                               "relative to the grid file or absolute")
    return str(where.resolve()), list(cases)


def check_resources(path: Path, text: str, resources: dict) -> None:
    """Refuse a ``[resources]`` key that submitit does not take, or a value of the wrong type
    or range (:func:`~.slurm.resource_error`), naming the file, the line and the key."""
    from .slurm import resource_error

    for key, value in resources.items():
        message = resource_error(key, value)
        if message is not None:
            raise GridError(f"{path}:{key_line(text, key)}: [resources] {message}")
