"""COGS files and cases (Kim & Linzen, "COGS: A Compositional Generalization Challenge Based on
Semantic Interpretation", EMNLP 2020; github.com/najoungkim/COGS).

A COGS file is tab-separated, one example a line: the sentence, its logical form (LF) and the
case (``in_distribution``, ``primitive``, ``exposure_example_*`` in training; one of the 21
generalization cases in ``gen.tsv``).  Two LF formats are read: the original one
(``rose ( x _ 1 ) AND help . theme ( x _ 3 , x _ 1 )``, variables are token positions) and the
variable-free one of Qiu et al. (2022) as distributed with ReCOGS
(github.com/frankaging/ReCOGS ``variable_free/``: ``help ( theme = rose , agent = dog )``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List

from ..errors import DataFormatError
from ..files import iter_text_lines

#: COGS split file stem -> fairseq split name (``dev`` is fairseq's default --valid-subset
#: ``valid``; ``gen`` is decoded with ``fairseq-generate --gen-subset gen``)
SPLITS: Dict[str, str] = {"train": "train", "dev": "valid", "test": "test", "gen": "gen"}

LEXICAL, STRUCTURAL = "lexical", "structural"

#: The 21 generalization cases of COGS and their type.  Source: Kim & Linzen (2020), Sec. 3
#: (case -> section in the COGS repository's data/gen_cases_to_paper_sections.json).  Lexical:
#: a familiar word in a familiar structure it was not seen in (3.1 primitives and grammatical
#: roles, 3.4 verb argument structure alternation, 3.5 verb class); structural: a familiar
#: structure in a new structural position or depth (3.2 object-modifying PP -> subject PP,
#: 3.3 recursion depth), the distinction the paper draws between the two kinds of case.
CASE_TYPES: Dict[str, str] = {
    "subj_to_obj_common": LEXICAL, "subj_to_obj_proper": LEXICAL,
    "obj_to_subj_common": LEXICAL, "obj_to_subj_proper": LEXICAL,
    "prim_to_subj_common": LEXICAL, "prim_to_subj_proper": LEXICAL,
    "prim_to_obj_common": LEXICAL, "prim_to_obj_proper": LEXICAL,
    "prim_to_inf_arg": LEXICAL,
    "active_to_passive": LEXICAL, "passive_to_active": LEXICAL,
    "obj_omitted_transitive_to_transitive": LEXICAL, "unacc_to_transitive": LEXICAL,
    "do_dative_to_pp_dative": LEXICAL, "pp_dative_to_do_dative": LEXICAL,
    "only_seen_as_transitive_subj_as_unacc_subj": LEXICAL,
    "only_seen_as_unacc_subj_as_unerg_subj": LEXICAL,
    "only_seen_as_unacc_subj_as_obj_omitted_transitive_subj": LEXICAL,
    "obj_pp_to_subj_pp": STRUCTURAL, "cp_recursion": STRUCTURAL, "pp_recursion": STRUCTURAL,
}


def case_type(case: str) -> str:
    """``lexical`` or ``structural`` for a generalization case (:data:`CASE_TYPES`), else
    ``in_distribution`` (the dev/test case and any training case)."""
    return CASE_TYPES.get(case, "in_distribution")


@dataclass(frozen=True)
class CogsExample:
    """One line of a COGS file.

    Attributes:
        sentence: the sentence, tokens separated by single spaces.
        lf: the logical form, tokens separated by single spaces.
        case: the third column.
        line: 1-based line number in ``path``.
        path: the file.
    """

    sentence: str
    lf: str
    case: str
    line: int
    path: str

    @property
    def where(self) -> str:
        """``path:line`` for messages."""
        return f"{self.path}:{self.line}"


def lf_format(lf: str) -> str:
    """``original`` (variables ``x _ N``, terms joined by ``AND`` or ``;``) or
    ``variable_free``.  A primitive's ``LAMBDA`` form is the same in both formats (and reads
    as ``original``)."""
    tokens = lf.split()
    return "original" if ("x" in tokens and "_" in tokens) or "LAMBDA" in tokens or \
        "AND" in tokens or ";" in tokens else "variable_free"


def data_lf_format(examples: List[CogsExample]) -> str:
    """The LF format of a data set: that of its first LF that is not a primitive's
    ``LAMBDA`` form (``original`` when all are)."""
    return next((lf_format(e.lf) for e in examples if "LAMBDA" not in e.lf.split()),
                "original")


def check_one_lf_format(files: Dict[str, List[CogsExample]]) -> str:
    """The one LF format (:func:`data_lf_format`) of COGS files, by path, the first one's.

    Raises:
        DataFormatError: a file whose logical forms have another format than the first's
            (a model trained on one would be scored against the other), naming both.
    """
    formats = {path: data_lf_format(examples) for path, examples in files.items() if examples}
    first = next(iter(formats.items()), (None, "original"))
    for path, fmt in formats.items():
        if fmt != first[1]:
            raise DataFormatError(
                f"{path}: {fmt} logical forms, but {first[0]} has {first[1]} ones. Fix: take "
                "all the files from one release (COGS's data/ folder, original forms, or "
                "ReCOGS's variable_free/ folder)")
    return first[1]


def read_cogs_tsv(path: str | os.PathLike) -> List[CogsExample]:
    """Read a COGS TSV file.

    Args:
        path: a file of ``sentence<TAB>logical form<TAB>case`` lines (UTF-8).

    Returns:
        the examples in file order, whitespace inside each column normalized to single
        spaces.

    Raises:
        DataFormatError: the file cannot be read, a line has not three tab-separated columns,
            an empty sentence, LF or case (names file:line, the cause and the fix), or the
            file has no example.
    """
    out: List[CogsExample] = []
    for lineno, raw in iter_text_lines(path):
        text = raw.rstrip("\n").rstrip("\r")
        if not text.strip():
            raise DataFormatError(f"{path}:{lineno}: empty line. Fix: remove it (a COGS file "
                                  "has one sentence<TAB>logical form<TAB>case per line)")
        cols = text.split("\t")
        if len(cols) != 3:
            raise DataFormatError(f"{path}:{lineno}: {len(cols)} tab-separated columns, "
                                  "expected 3 (sentence, logical form, case). Fix: write the "
                                  "line as sentence<TAB>logical form<TAB>case")
        sentence, lf, case = (" ".join(c.split()) for c in cols)
        for name, value in (("sentence", sentence), ("logical form", lf), ("case", case)):
            if not value:
                raise DataFormatError(f"{path}:{lineno}: empty {name}. Fix: give the line its "
                                      f"{name} (or remove the line)")
        out.append(CogsExample(sentence, lf, case, lineno, str(path)))
    if not out:
        raise DataFormatError(f"{path} holds no examples. Fix: pass a non-empty COGS file")
    return out
