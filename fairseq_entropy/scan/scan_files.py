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
    return "".join(line + "\n" for line in lines)
