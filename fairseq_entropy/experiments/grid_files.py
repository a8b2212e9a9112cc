"""Reading a grid file and checking its values (:mod:`.grids` turns them into cells): the
TOML or JSON text, the line of a key for error messages, the range of every value and the
``[resources]`` keys."""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path
from typing import Tuple

from ..errors import DataFormatError, UserError
from ..files import loads_json, read_text
from ..scan.entropy import COMPONENT_VALUES
from ..scan.grammar import PAPER_VERBS
from ..scan.levels import level_name, named_exactly
from .preset_values import MAX_EPOCHS, MAX_UPDATE_LIMIT

EXPERIMENTS = ("exp1", "exp2")


class GridError(UserError, ValueError):
    """An unreadable or inconsistent grid file."""


def read_grid(path: Path) -> Tuple[dict, str]:
    """The grid's keys and its text (read by :func:`~fairseq_entropy.files.read_text`, so a
    byte-order mark and CRLF line ends are accepted)."""
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise GridError(f"{path}: the grid file {what}. Fix: pass a .toml or .json file, e.g. "
                        "one from recipes/grids/")
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
    sizes k, integers in 1..number of verbs); ``seeds`` (integers in 0..2**32-1); ``n``
    (positive integers); ``presets`` (names); ``schedule`` (``"paper"``, ``epochs``
    in (0, MAX_EPOCHS] or an integer ``max_update`` in 1..MAX_UPDATE_LIMIT); ``pack`` (an
    integer >= 0); ``title`` and ``notes`` (text).  Lists must be non-empty and hold each
    value once.

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

    if exp == "exp1":
        # the largest level with 3 decimals (a level's name has 3) that can be built
        h_max = math.floor(math.log2(n_values) * 1e3 + 1e-9) / 1e3
        number_list("levels", False, 0, h_max,
                    f"entropies in bits (the {component} class has {n_values} values, so at "
                    f"most log2({n_values}) bits)")
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


def check_resources(path: Path, text: str, resources: dict) -> None:
    """Refuse a ``[resources]`` key that submitit does not take, or a value of the wrong type
    or range (:func:`~.slurm.resource_error`), naming the file, the line and the key."""
    from .slurm import resource_error

    for key, value in resources.items():
        message = resource_error(key, value)
        if message is not None:
            raise GridError(f"{path}:{key_line(text, key)}: [resources] {message}")
