"""Experiment grids: one declarative file per figure or table, expanded into cells.

A grid file (TOML, read with :mod:`tomllib`, or the same keys as JSON) names::

    experiment = "exp1"                      # exp1 (mixing), exp2 (support) or cogs
    title = "Experiment 1: accuracy against entropy"
    presets = ["exp1_transformer_sinusoidal", "exp1_fconv"]   # names in the presets file
    levels = [0, 0.5, 1, 1.5, 2, 2.5, 3]     # exp1, cogs: entropy in bits; exp2: support k
    seeds = [830, 231, 42, 9876, 2]          # the authors' five seeds
    n = [6000]                               # exp1 training commands (one or more sizes)
    schedule = "paper"                       # or {epochs = 8} or {max_update = 30}
    build_args = ["--component", "direction", "--restricted", "left"]   # optional, exp1:
                                             # extra ``fairseq-entropy build exp1`` arguments
    presets_file = "my_presets.json"         # optional: your presets, added to the packaged
                                             # ones (a path relative to the grid file)
    user_dir = "my_plugin"                   # optional: your --user-dir package (relative to
                                             # the grid file), for training and decoding
    pack = 16                                # optional: train up to 16 compatible cells in
                                             # one fairseq-train (0 or 1: no packing)
    cogs_dir = "COGS/data"                   # cogs: COGS's train/dev/test/gen.tsv (relative
                                             # to the grid file), which build cogs selects from
    case = "subj_to_obj_common"              # cogs: the lexical case whose tested slot the
    cases = ["subj_to_obj_common", "prim_to_obj_proper"]  # levels control (one or a list)

    [data]                                   # optional: levels binarized already (e.g. the
    "3" = "data-bin/high_uniform"            # authors' files, binarize --experiment exp1),
                                             # one per level, relative to the grid file;
                                             # the sweep trains on them and builds nothing

    [resources]                              # submitit / Slurm, per cell
    timeout_min = 60
    gpus_per_node = 1
    cpus_per_task = 2
    mem_gb = 8
    slurm_partition = "gpu"                  # any submitit ``slurm_*`` parameter

A cell is one (preset, N, seed, level): the data it needs is (experiment, N, seed, level), so
cells of different presets share their data.  Paths under a sweep root::

    data/<exp>/[n<N>/]seed<S>/<level>/          raw build (``fairseq-entropy build``)
    data-bin/<exp>/[n<N>/]seed<S>/<level>/      binarized level
    runs/<exp>/<preset>/[n<N>/]seed<S>/<level>/ checkpoints, logs, generate output, scores

A level of ``data`` trains from its own directory, and its runs are under
``runs/<exp>/<preset>/seed<S>/<level>/`` (no N: the directory's training file sets it).
With ``build_args``, ``<exp>`` becomes ``<exp>+<key>=<value>+...``
(``exp1+component=direction+restricted=left``), so the data and runs of another component
class never mix with the verbs' under one root.  A COGS cell is one (preset, case, seed,
level): ``<exp>`` is ``cogs+case=<case>``, no N, its data ``build cogs`` and ``binarize
--format cogs``, its run decoding and scoring ``test`` and the case's ``gen`` sentences.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import UserError
from ..scan.build_requests import check_build_args
from ..scan.levels import level_name
from .grid_files import (GridError, check_resources, check_values, cogs_keys, key_line,
                         read_grid)
from .presets import PresetError, load_presets, unknown_preset_message

#: the seeds the paper's authors trained with (their repository's run scripts)
AUTHORS_SEEDS = (830, 231, 42, 9876, 2)
#: keys a grid file may have
GRID_KEYS = {"experiment", "title", "presets", "levels", "seeds", "n", "schedule",
             "build_args", "resources", "notes", "presets_file", "user_dir", "pack", "data",
             "cogs_dir", "case", "cases"}
#: build options a grid's ``build_args`` may pass (the sweep sets --out, --levels, --n and
#: --seed itself); each takes one value
BUILD_OPTIONS = ("--component", "--restricted", "--restricted-verb", "--verbs",
                 "--valid-fraction")


@dataclass(frozen=True)
class Schedule:
    """Training length of every cell: the preset's own (``paper``) or an override.

    Attributes:
        epochs: epochs instead of the preset's (None: the preset's).
        max_update: updates instead of the preset's (None: the preset's).
    """

    epochs: Optional[float] = None
    max_update: Optional[int] = None

    @property
    def label(self) -> str:
        """``paper``, ``epochs8`` or ``updates30``."""
        if self.max_update is not None:
            return f"updates{self.max_update}"
        if self.epochs is not None:
            return f"epochs{self.epochs:g}"
        return "paper"

    def env(self) -> Dict[str, str]:
        """The ``EPOCHS`` / ``MAX_UPDATE`` variables of ``recipes/train_level.sh``."""
        out = {}
        if self.epochs is not None:
            out["EPOCHS"] = f"{self.epochs:g}"
        if self.max_update is not None:
            out["MAX_UPDATE"] = str(self.max_update)
        return out


@dataclass(frozen=True)
class Cell:
    """One training run of a grid: a preset trained on one level of one seed's data.

    Attributes:
        experiment: ``exp1``, ``exp2`` or ``cogs``.
        preset: preset name (resolved through :func:`~.presets.load_presets`).
        model: the preset's model name (the paper's name, e.g. ``cnn``).
        n: training commands of an Experiment 1 level (None for Experiment 2 and COGS).
        seed: data and training seed.
        level: entropy in bits (exp1, cogs) or support size k (exp2).
        schedule: training length.
        build_args: extra ``fairseq-entropy build`` arguments (option, value, ...).
        presets_file: a user's presets file holding ``preset`` (None: packaged presets only).
        user_dir: a user's ``--user-dir`` package (None: the plugin).
        data_format: the preset's data format (``pairs``; ``lm``: binarized with
            ``--format lm`` under ``data-bin-lm/``).
        data: a binarized level given by the grid's ``data`` (absolute path; None: the
            sweep builds and binarizes the level under its root).
        case: a COGS cell's lexical case (None for the other experiments).
        cogs_dir: a COGS cell's source directory (absolute; None for the others).
    """

    experiment: str
    preset: str
    model: str
    n: Optional[int]
    seed: int
    level: float
    schedule: Schedule = field(default_factory=Schedule)
    build_args: Tuple[str, ...] = ()
    presets_file: Optional[str] = None
    user_dir: Optional[str] = None
    data_format: str = "pairs"
    data: Optional[str] = None
    case: Optional[str] = None
    cogs_dir: Optional[str] = None

    @property
    def data_tag(self) -> str:
        """``<exp>``, or ``<exp>+key=value+...`` with ``build_args``
        (``exp1+component=direction+restricted=left``) or a COGS case
        (``cogs+case=subj_to_obj_common``)."""
        if self.case is not None:
            return f"{self.experiment}+case={self.case}"
        if not self.build_args:
            return self.experiment
        pairs = zip(self.build_args[::2], self.build_args[1::2])
        # no commas (``--verbs walk,run``): fairseq-preprocess reads a comma in a path as a
        # list of paths
        return "+".join([self.experiment,
                         *(f"{k.lstrip('-')}={v.replace(',', '-')}" for k, v in pairs)])

    @property
    def level_name(self) -> str:
        """Directory name of the level (``entropy_1.5``, ``support_3``)."""
        return level_name(self.experiment, self.level)

    def _data_part(self) -> Path:
        n = Path(f"n{self.n}") if self.n is not None else Path()
        return Path(self.data_tag) / n / f"seed{self.seed}"

    @property
    def data_key(self) -> str:
        """Identifies the data the cell trains on; cells with equal keys share it."""
        if self.data is not None:
            return self.data
        key = str(self._data_part() / self.level_name)
        return key if self.data_format == "pairs" else f"{key} ({self.data_format})"

    def build_dir(self, root: str | Path) -> Path:
        """Raw build directory; the level's files are in ``build_dir / level_name``."""
        return Path(root) / "data" / self._data_part() / self.level_name

    def databin(self, root: str | Path) -> Path:
        """Binarized level directory (``data-bin-<format>/`` for a format other than pairs)."""
        if self.data is not None:
            return Path(self.data)
        top = "data-bin" if self.data_format == "pairs" else f"data-bin-{self.data_format}"
        return Path(root) / top / self._data_part() / self.level_name

    def run_dir(self, root: str | Path) -> Path:
        """The run directory handed to ``recipes/train_level.sh``."""
        n = Path(f"n{self.n}") if self.n is not None else Path()
        return (Path(root) / "runs" / self.data_tag / self.preset / n / f"seed{self.seed}"
                / self.level_name)

    @property
    def group(self) -> str:
        """The part of :attr:`name` before the seed: ``<preset>/[n<N>/]``, after
        ``<data_tag>/`` when :attr:`data_tag` is not the experiment's name
        (``exp1+component=direction+restricted=left/exp1_fconv/n6000/``)."""
        tag = f"{self.data_tag}/" if self.data_tag != self.experiment else ""
        n = f"n{self.n}/" if self.n is not None else ""
        return f"{tag}{self.preset}/{n}"

    @property
    def name(self) -> str:
        """The cell's name in progress lines, ``sweep-status.tsv`` rows and summaries:
        ``exp1_fconv/n6000/seed830/entropy_1.5``, or with ``build_args``
        ``exp1+component=direction+restricted=left/exp1_fconv/n6000/seed830/entropy_1.5``
        (:attr:`group`), so that two cells with different run directories (:meth:`run_dir`)
        under one root never share a name."""
        return f"{self.group}seed{self.seed}/{self.level_name}"


@dataclass
class Grid:
    """A parsed grid file (see the module docstring for the keys)."""

    path: Path
    experiment: str
    presets: List[str]
    levels: List[float]
    seeds: List[int]
    n: List[Optional[int]]
    schedule: Schedule
    title: str = ""
    resources: Dict[str, object] = field(default_factory=dict)
    models: Dict[str, str] = field(default_factory=dict)
    formats: Dict[str, str] = field(default_factory=dict)
    build_args: Tuple[str, ...] = ()
    presets_file: Optional[str] = None
    user_dir: Optional[str] = None
    pack: int = 0
    data: Dict[float, str] = field(default_factory=dict)
    cases: List[Optional[str]] = field(default_factory=lambda: [None])
    cogs_dir: Optional[str] = None

    @property
    def name(self) -> str:
        """The file name without its suffix (``exp1``)."""
        return self.path.stem

    def pack_size(self, asked: Optional[int] = None) -> int:
        """The most cells one fairseq-train trains: ``asked`` (``sweep --pack``), else the
        grid's ``pack``.

        Raises:
            GridError: above 1 for a COGS grid, whose levels' dictionaries differ (build cogs
                drops words from training) while packed runs share one.
        """
        size = self.pack if asked is None else asked
        if size > 1 and self.experiment == "cogs":
            raise GridError(f"--pack {size}: the levels of a COGS case have dictionaries of "
                            "their own (build cogs drops words from training), and packed "
                            "runs share one. Fix: drop --pack (or --pack 0)")
        return size

    def _subset(self, what: str, values: Sequence, wanted: Optional[Sequence]) -> list:
        """``values`` in grid order, kept to ``wanted`` when given (GridError names any
        wanted value the grid lacks)."""
        if not wanted:
            return list(values)
        def show(v):
            return f"{v:g}" if isinstance(v, float) else str(v)

        unknown = [show(w) for w in wanted if w not in values]
        if unknown:
            raise GridError(f"{self.path}: {what}(s) {', '.join(unknown)} not in the grid. Fix: "
                            f"choose from {', '.join(map(show, values))}")
        return [v for v in values if v in wanted]

    def cells(self, presets: Optional[Sequence[str]] = None,
              seeds: Optional[Sequence[int]] = None,
              levels: Optional[Sequence[float]] = None,
              sizes: Optional[Sequence[int]] = None,
              cases: Optional[Sequence[str]] = None) -> List[Cell]:
        """Every cell, ordered preset, case (COGS), N, level, seed (so that a partial sweep
        covers whole curves first).

        Args:
            presets: keep only these presets (None: all of the grid's).
            seeds: keep only these seeds (None: all of the grid's).
            levels: keep only these levels, entropy in bits (exp1) or support size k (exp2)
                (None: all of the grid's).
            sizes: keep only these training-set sizes N, in commands (None: all of the
                grid's ``n``).
            cases: keep only these COGS cases (None: all of the grid's).

        Raises:
            GridError: a name in ``presets``, a seed in ``seeds``, a level in ``levels``, a
                size in ``sizes`` or a case in ``cases`` is not in the grid (or the grid has
                no cases).
        """
        chosen = self._subset("preset", self.presets, presets)
        chosen_seeds = self._subset("seed", self.seeds, seeds)
        chosen_levels = self._subset("level", self.levels, levels)
        if sizes and self.n == [None]:
            raise GridError(f"{self.path}: --n {', '.join(map(str, sizes))}: the grid's "
                            f"experiment ({self.experiment}) has no n (a level's size "
                            "follows from its support). Fix: drop --n")
        chosen_n = self._subset("n", self.n, sizes)
        if cases and self.cases == [None]:
            raise GridError(f"{self.path}: --case {', '.join(cases)}: the grid's experiment "
                            f"({self.experiment}) has no cases. Fix: drop --case")
        chosen_cases = self._subset("case", self.cases, cases)
        return [Cell(self.experiment, p, self.models[p], n, s, lv, self.schedule,
                     self.build_args, self.presets_file, self.user_dir,
                     self.formats.get(p, "pairs"), self.data.get(lv), case, self.cogs_dir)
                for p in chosen for case in chosen_cases for n in chosen_n
                for lv in chosen_levels for s in chosen_seeds]


def load_grid(path: str | Path, presets_path: Optional[str | Path] = None,
              user_dir: Optional[str | Path] = None) -> Grid:
    """Read and check a grid file.

    Args:
        path: a ``.toml`` or ``.json`` grid file.
        presets_path: a user's presets file, added to the packaged presets (default: the
            grid's ``presets_file``, relative to the grid file; none: packaged only).
        user_dir: a user's ``--user-dir`` package (default: the grid's ``user_dir``, relative
            to the grid file; none: the plugin).

    Raises:
        GridError: the file is unreadable, has an unknown or missing key, a value of the
            wrong type, a preset that does not exist or belongs to another experiment,
            ``n`` given for Experiment 2, a bad COGS key (:func:`~.grid_files.cogs_keys`:
            ``cogs_dir``, ``case``, ``cases``), ``build_args`` that are not option-value pairs
            of :data:`BUILD_OPTIONS` (or given for Experiment 2), a ``user_dir`` that is not
            a package directory, or a ``[resources]`` key that submitit does not take (or a
            value of the wrong type); the message names the file, the key and the fix.
        PresetError: an unusable presets file.
    """
    path = Path(path)
    raw, text = read_grid(path)
    if not isinstance(raw, dict):
        raise GridError(f"{path}:1: expected a table of keys, got {type(raw).__name__}. Fix: "
                        "see recipes/grids/exp1.toml")

    def fail(msg: str, key: Optional[str] = None) -> GridError:
        return GridError(f"{path}:{key_line(text, key) if key else 1}: {msg}")

    unknown = sorted(set(raw) - GRID_KEYS)
    if unknown:
        raise fail(f"unknown key(s) {', '.join(unknown)}. Fix: use only "
                   f"{', '.join(sorted(GRID_KEYS))}", unknown[0])
    for key in ("experiment", "presets", "levels", "seeds"):
        if key not in raw:
            raise fail(f"missing key {key!r}. Fix: add it (see recipes/grids/exp1.toml)")
    exp = raw["experiment"]
    if exp == "exp2" and "n" in raw:
        raise fail("n is given, but Experiment 2's training size follows from the support "
                   "size. Fix: remove n", "n")
    check_values(raw, text, path)
    cogs_dir, cases = cogs_keys(raw, text, path)
    levels = [int(v) if exp == "exp2" else float(v) for v in raw["levels"]]
    seeds = [int(v) for v in raw["seeds"]]
    sizes: List[Optional[int]] = [None] if exp in ("exp2", "cogs") or "data" in raw else \
        [int(v) for v in raw.get("n", [6000])]
    names = raw["presets"]
    # a value given on the command line is blamed on its option, not on the grid file
    given = {"user_dir": user_dir, "presets_file": presets_path}
    presets_path = presets_path or _grid_path(path, raw, "presets_file", fail)
    user_dir = user_dir or _grid_path(path, raw, "user_dir", fail)
    if user_dir is not None and not (Path(user_dir) / "__init__.py").is_file():
        why = (f"{user_dir}: not a Python package directory (no __init__.py in it). Fix: name "
               "the folder of your package, whose __init__.py imports fairseq_entropy and "
               "registers your models")
        raise GridError(f"--user-dir {why}") if given["user_dir"] else \
            fail(f"user_dir {why}", "user_dir")
    try:
        known = load_presets(presets_path)
    except PresetError as e:
        raise PresetError(f"--presets {e}" if given["presets_file"] else str(e)) from None
    models = {}
    for p in names:
        if p not in known:
            raise fail(unknown_preset_message(p, known), "presets")
        pexp = known[p].get("experiment")
        if pexp and pexp != exp:
            raise fail(f"preset {p!r} is a preset of {pexp} but the grid is of {exp}. Fix: "
                       f"use a preset of {exp}", "presets")
        models[p] = known[p].get("model", p)
    formats = {p: known[p].get("format", "pairs") for p in names}

    sched = raw.get("schedule", "paper")
    schedule = Schedule() if sched == "paper" else \
        Schedule(epochs=float(sched["epochs"]) if "epochs" in sched else None,
                 max_update=int(sched["max_update"]) if "max_update" in sched else None)
    build_args = raw.get("build_args", [])
    if build_args:
        if exp != "exp1":
            raise fail("build_args is given, but only Experiment 1 builds take other component "
                       "classes. Fix: remove build_args", "build_args")
        pairs_ok = (isinstance(build_args, list) and len(build_args) % 2 == 0
                    and all(isinstance(a, str) for a in build_args)
                    and all(k in BUILD_OPTIONS and not v.startswith("-")
                            for k, v in zip(build_args[::2], build_args[1::2])))
        if not pairs_ok:
            raise fail(f"build_args = {build_args!r}. Fix: a list of option-value pairs of "
                       f"{', '.join(BUILD_OPTIONS)}, e.g. build_args = [\"--component\", "
                       "\"direction\", \"--restricted\", \"left\"] (the sweep sets --out, "
                       "--levels, --n and --seed)", "build_args")
        try:
            check_build_args(list(zip(build_args[::2], build_args[1::2])))
        except UserError as e:
            raise fail(f"build_args: {e}", "build_args") from None
    data = _data_levels(path, raw, levels, fail) if "data" in raw else {}
    resources = raw.get("resources", {})
    if not isinstance(resources, dict):
        raise fail("resources must be a table, e.g. [resources] timeout_min = 60", "resources")
    check_resources(path, text, resources)
    return Grid(path=path, experiment=exp, presets=list(names), levels=levels, seeds=seeds,
                n=sizes, schedule=schedule, title=str(raw.get("title", "")),
                resources=dict(resources), models=models, formats=formats,
                build_args=tuple(build_args),
                presets_file=str(Path(presets_path).resolve()) if presets_path else None,
                user_dir=str(Path(user_dir).resolve()) if user_dir else None,
                pack=int(raw.get("pack", 0)), data=data, cases=cases, cogs_dir=cogs_dir)


def _data_levels(grid: Path, raw: dict, levels: List[float], fail) -> Dict[float, str]:
    """The grid's ``data`` table: level -> absolute path of its binarized level.

    Every level of ``levels`` needs one entry and every entry a level; each directory must be
    a binarized level (its ``manifest.json``) of the grid's experiment whose measured
    training entropy is within 0.05 bit of an Experiment 1 level, or whose support has k
    verbs for an Experiment 2 level k.

    Raises:
        GridError (through ``fail``): a malformed table, ``n`` or ``build_args`` beside it, a
            level without a directory or a key that is no level, a missing or unbinarized
            directory, a level of another experiment (with the ``binarize --experiment`` fix)
            or one whose entropy or support differs from its key.
    """
    from ..files import read_json

    exp, table = raw["experiment"], raw["data"]
    for key in ("n", "build_args"):
        if key in raw:
            raise fail(f"{key} and data are both given; a level of data is binarized already "
                       f"(its training file sets its size). Fix: remove {key}", key)
    if not isinstance(table, dict) or not all(isinstance(v, str) and v for v in
                                              table.values()):
        raise fail("data must be a table of level = \"path\", e.g. [data] \"3\" = "
                   "\"data-bin/high_uniform\"", "data")
    out: Dict[float, str] = {}
    for key, value in table.items():
        try:
            level = int(key) if exp == "exp2" else float(key)
        except ValueError:
            level = None
        if level not in levels:
            shown = ", ".join(f"{v:g}" for v in levels)
            raise fail(f"data key {key!r} is not a level of the grid ({shown}). Fix: key "
                       "each directory by its level", "data")
        where = grid.parent / value
        manifest = where / "manifest.json"
        if not manifest.is_file():
            raise fail(f"data {key!r} = {value!r}: {where} is not a binarized level (no "
                       "manifest.json). Fix: fairseq-entropy binarize --train FILE --test "
                       f"FILE --experiment {exp} --out {where}", "data")
        m = read_json(manifest)
        if m.get("experiment") != exp:
            raise fail(f"data {key!r}: {where} is a level of {m.get('experiment')}, the grid "
                       f"of {exp}. Fix: binarize its files again with fairseq-entropy binarize "
                       f"--experiment {exp} (checked against the files), or use a grid of "
                       f"{m.get('experiment')}", "data")
        if exp == "exp1" and abs(float(m.get("entropy_bits") or 0.0) - level) > 0.05:
            raise fail(f"data {key!r}: {where} has {m.get('entropy_bits')} bits in its "
                       f"{m.get('controlled_slot')} slot, not {level:g}. Fix: key it by its "
                       "entropy", "data")
        if exp == "exp2" and len(m.get("support") or []) != level:
            raise fail(f"data {key!r}: {where} has support size {len(m.get('support') or [])}"
                       f", not {level}. Fix: key it by its support size", "data")
        out[level] = str(where.resolve())
    missing = [f"{v:g}" for v in levels if v not in out]
    if missing:
        raise fail(f"data has no directory for level(s) {', '.join(missing)}. Fix: add them, "
                   "or remove them from levels", "data")
    return out


def _grid_path(grid: Path, raw: dict, key: str, fail) -> Optional[Path]:
    """The path of ``raw[key]`` relative to the grid file's folder (None when absent).

    Raises:
        GridError (through ``fail``): the value is not a non-empty string.
    """
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise fail(f"{key} = {value!r}. Fix: a path (relative to the grid file), e.g. "
                   f"{key} = \"my_{'presets.json' if key == 'presets_file' else 'plugin'}\"")
    return grid.parent / value
