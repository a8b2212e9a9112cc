"""A data set given as SCAN-format files (``IN: ... OUT: ...``): the validation split held out
of the training file and the manifest written beside the binarized data.

The manifest records the source files (path, SHA-256, lines) and the *restricted pairs*: the
(verb, slot) pairs the test split has and the training split lacks, from which it names the
controlled slot and its training entropy (Eq. 1 of Wold et al., arXiv 2505.13089) as a built
level's manifest does.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..version import __version__
from .databin import BinarizeError
from .builders import RESTRICTED_VERB
from .datafiles import Example
from .entropy import SLOTS, SlotStatistics, unseen_pairs
from .grammar import Grammar

#: fraction of the training file held out for validation when no validation file is given
DEFAULT_SCAN_VALID_FRACTION = 0.05


def sha256_of(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes.

    Raises:
        OSError: the file cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hold_out(examples: Sequence[Example], fraction: float, seed: int
             ) -> Tuple[List[Example], List[Example]]:
    """Split ``examples`` into (train, valid): ``round(fraction * n)`` examples drawn uniformly
    without replacement for validation, seeded by ``seed``; both keep the file order.

    Raises:
        BinarizeError: ``fraction`` outside (0, 1), or a split that would be empty.
    """
    if not 0.0 < fraction < 1.0:
        raise BinarizeError(f"validation fraction {fraction} is outside (0, 1). Fix: pass "
                            "--valid-fraction between 0 and 1, e.g. 0.05")
    n = len(examples)
    n_valid = int(round(fraction * n))
    if n_valid < 1 or n_valid >= n:
        raise BinarizeError(f"holding out {fraction} of {n} training commands leaves "
                            f"{n - n_valid} for training and {n_valid} for validation. Fix: "
                            "choose a --valid-fraction that leaves both non-empty, or pass "
                            "--valid FILE")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(b"scan-valid")]))
    chosen = set(rng.choice(n, size=n_valid, replace=False).tolist())
    train = [e for i, e in enumerate(examples) if i not in chosen]
    valid = [e for i, e in enumerate(examples) if i in chosen]
    return train, valid


def scan_manifest(name: str, grammar: Grammar, splits: Dict[str, List[Example]],
                  sources: Dict[str, dict], seed: int, valid_fraction: Optional[float]) -> dict:
    """The manifest of a data set binarized from SCAN-format files.

    Records the grammar, each source file (path, SHA-256, lines), how the validation split was
    made, split sizes, slot verb counts and entropies (bits) of every split, and the
    *restricted pairs*: the (verb, slot) pairs the test split has and the training split lacks
    (as ``fairseq-entropy measure --train`` lists them).  When there is exactly one restricted
    pair (v*, s), ``controlled_slot`` is the other slot, where v* was seen in training, and
    ``entropy_bits`` the training entropy of that slot: the entropy the paper relates to
    generalizing v* into s, as a built level's ``controlled_slot`` is.  Otherwise both are
    ``None``.

    Args:
        name: the level's name (the output directory's).
        splits: split name -> examples, already validated against ``grammar``.
        sources: split name -> ``{"path", "sha256", "lines"}`` of each file given.
        seed: the seed of the held-out validation draw.
        valid_fraction: the fraction held out of the training file, or ``None`` when a
            validation file was given.

    Returns:
        the JSON-ready manifest (entropies in bits, 6 decimals).

    Raises:
        GrammarError: a command of ``splits`` that ``grammar`` does not parse.
    """
    stats = {s: SlotStatistics.of([grammar.parse(e.command) for e in ex], grammar.verbs)
             for s, ex in splits.items()}
    restricted = (unseen_pairs(stats["train"], stats["test"])
                  if "train" in stats and "test" in stats else [])
    slot = (next(s for s in SLOTS if s != restricted[0][1])
            if len(restricted) == 1 else None)
    h = stats["train"].entropy[slot] if slot and "train" in stats else None
    return {
        "package": "fairseq-entropy", "package_version": __version__,
        "experiment": "scan", "level": name, "grammar": grammar.name,
        "builder": "scan-files", "seed": int(seed),
        "sources": sources,
        "valid": ({"held_out_from": "train", "fraction": valid_fraction, "seed": int(seed)}
                  if valid_fraction is not None
                  else {"file": sources.get("valid", {}).get("path")}),
        "sizes": {s: len(ex) for s, ex in splits.items()},
        "restricted_pairs": [list(p) for p in restricted],
        "controlled_slot": slot,
        "entropy_bits": None if h is None else round(h, 6),
        "slots": {s: st.as_dict() for s, st in stats.items()},
    }



def scan_files_summary(manifest: dict, train_name: Optional[str]) -> str:
    """The lines ``fairseq-entropy binarize --train ...`` prints about the binarized SCAN files:
    the validation split held out of ``train_name`` (when the manifest's ``valid`` records a
    ``fraction``), the split sizes and the restricted (verb, slot) pairs (in test, not in
    train).

    Args:
        manifest: the ``manifest.json`` written by :func:`scan_manifest`.
        train_name: the training file as the user named it.

    Returns:
        one or two lines, each ending in a newline.

    Raises:
        KeyError: ``manifest`` lacks ``valid``, ``sizes`` or ``restricted_pairs``.
    """
    held = manifest["valid"]
    lines = []
    if "fraction" in held:
        sizes = manifest["sizes"]
        lines.append(f"no --valid file: held out {sizes['valid']} of the "
                     f"{sizes['train'] + sizes['valid']} commands of {train_name} for "
                     f"validation (fraction {held['fraction']}, seed {held['seed']})")
    pairs = ", ".join(f"({v}, {slot})" for v, slot in manifest["restricted_pairs"]) or "none"
    splits = f"splits: {', '.join(f'{k} {v}' for k, v in manifest['sizes'].items())}"
    if "test" in manifest["sizes"]:
        lines.append(f"{splits}; (verb, slot) pairs in test but not in train: {pairs}")
    else:
        lines.append(f"{splits}; no test split (no --test file): this data trains, but "
                     "fairseq-generate and score need a test split (binarize again with "
                     "--test FILE)")
    if manifest.get("experiment") in STATED_SLOTS:
        held = STATED_SLOTS[manifest["experiment"]][0]
        support = (f", support {', '.join(manifest['support'])} (k = {len(manifest['support'])})"
                   if manifest.get("support") else "")
        lines.append(f"a level of {manifest['experiment']} (checked: "
                     f"{manifest['restricted_verb']} never executed {held} in training)"
                     f"{support}; {manifest['controlled_slot']} slot entropy "
                     f"{manifest['entropy_bits']:.4f} bits in training")
    return "".join(line + "\n" for line in lines)


#: the slot each stated experiment keeps the restricted verb out of in training, and the
#: slot whose verb distribution it controls (Wold et al., arXiv 2505.13089, Sec. 3)
STATED_SLOTS = {"exp1": ("first", "second"), "exp2": ("second", "first")}


def _line_of(path: str | os.PathLike, command: str) -> int:
    """The 1-based line of ``path`` whose ``IN:`` side is ``command`` (0 when none is)."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.startswith("IN:") and " OUT:" in line and \
                    " ".join(line[3:].split(" OUT:", 1)[0].split()) == command:
                return lineno
    return 0


def stated_experiment(experiment: str, grammar: Grammar, splits: Dict[str, List[Example]],
                      paths: Dict[str, str], restricted_verb: Optional[str] = None,
                      support: Optional[int] = None) -> dict:
    """Check SCAN-format files against the experiment a user states for them, and return the
    manifest fields of a level of that experiment.

    Experiment 1 (mixing) keeps the restricted verb (default ``jump``) out of the first slot
    of every training and validation command, Experiment 2 (support) keeps it (default
    ``lunge``) out of the second; slots are by execution order, so ``"walk after jump"``
    executes jump first.  The test split must hold the restricted verb in that slot, the
    pair the level tests.  For Experiment 2 the support is the set of verbs of the training
    split's first slot, the restricted verb first; with ``support`` it must hold exactly
    that many verbs (the level's entropy is log2 k bits only for a uniform slot; the
    entropy recorded is the one measured).

    Args:
        experiment: ``exp1`` or ``exp2``.
        grammar: the grammar the files were validated against.
        splits: split name (``train``, ``valid``, ``test``) -> examples read from the file.
        paths: split name -> the file it was read from (for the line of a fault).
        restricted_verb: the verb kept out of its slot (default: the experiment's, as
            ``fairseq-entropy build`` has it).
        support: Experiment 2 only: the support size k stated for the training split.

    Returns:
        ``{"experiment", "restricted_verb", "controlled_slot"}``, and for Experiment 2
        ``"support"`` (the verbs in grammar order).

    Raises:
        BinarizeError: a verb outside the grammar, ``support`` with Experiment 1 or outside
            1..number of verbs, no training or test file, a training or validation command
            that executes the restricted verb in its held-out slot (names file:line), a test
            split without the tested pair, a training split that never shows the restricted
            verb in the other slot, or a support that differs from the stated one.
    """
    if experiment not in STATED_SLOTS:
        raise BinarizeError(f"--experiment {experiment}: expected exp1 or exp2. Fix: pass one")
    verb = restricted_verb or RESTRICTED_VERB[experiment]
    if verb not in grammar.verbs:
        raise BinarizeError(f"--restricted-verb {verb}: not a verb of the {grammar.name} "
                            f"grammar. Fix: choose one of {', '.join(grammar.verbs)}")
    if support is not None and experiment != "exp2":
        raise BinarizeError(f"--support {support} applies to Experiment 2 (the first slot's "
                            "support size k). Fix: drop --support, or pass --experiment exp2")
    if support is not None and not 1 <= support <= len(grammar.verbs):
        raise BinarizeError(f"--support {support}: the {grammar.name} grammar has "
                            f"{len(grammar.verbs)} verbs. Fix: pass k in 1..{len(grammar.verbs)}")
    for split in ("train", "test"):
        if split not in splits:
            raise BinarizeError(f"--experiment {experiment} is checked against the training "
                                f"and test files, and no --{split} file is given. Fix: pass "
                                f"--{split} FILE, or drop --experiment")
    held, controlled = STATED_SLOTS[experiment]
    fix = {"exp1": "remove the command from the training file (Experiment 1 never executes "
                   f"{verb} first in training), or drop --experiment exp1",
           "exp2": "remove the command from the training file (Experiment 2 never executes "
                   f"{verb} second in training), or drop --experiment exp2"}[experiment]
    for split in ("train", "valid"):
        for ex in splits.get(split, []):
            clause = getattr(grammar.parse(ex.command), held)
            if clause is not None and clause.verb == verb:
                where = f"{paths[split]}:{_line_of(paths[split], ex.command)}"
                raise BinarizeError(f"{where}: '{ex.command}' executes {verb} {held}, but "
                                    f"--experiment {experiment} states that {verb} is never "
                                    f"executed {held} in training. Fix: {fix}")
    tested = sum(1 for ex in splits["test"]
                 if (c := getattr(grammar.parse(ex.command), held)) is not None
                 and c.verb == verb)
    if not tested:
        raise BinarizeError(f"{paths['test']}: no command executes {verb} {held}, the pair "
                            f"({verb}, {held}) that an {experiment.replace('exp', 'Experiment ')}"
                            " level tests. Fix: pass the test file of the experiment, or drop "
                            "--experiment")
    if not any((c := getattr(grammar.parse(ex.command), controlled)) is not None
               and c.verb == verb for ex in splits["train"]):
        raise BinarizeError(f"{paths['train']}: no command executes {verb} {controlled}, the "
                            f"slot where an {experiment.replace('exp', 'Experiment ')} level "
                            f"shows {verb} in training. Fix: pass the training file of the "
                            "experiment, or another --restricted-verb")
    out = {"experiment": experiment, "restricted_verb": verb, "controlled_slot": controlled}
    if experiment == "exp2":
        seen = {cmd.first.verb for cmd in map(grammar.parse, (e.command for e in splits["train"]))
                if cmd.second is not None}
        verbs = [verb] + [v for v in grammar.verbs if v in seen and v != verb]
        if support is not None and len(verbs) != support:
            raise BinarizeError(f"{paths['train']}: the first slot holds {len(verbs)} verbs "
                                f"({', '.join(verbs)}), not --support {support}. Fix: pass "
                                f"--support {len(verbs)}, or the training file of support "
                                f"size {support}")
        out["support"] = verbs
    return out
