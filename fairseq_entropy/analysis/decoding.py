"""How a decode was made: the generation options fairseq-generate logs when it starts (its
whole configuration, one line), read back from the decode's log, and the check that refuses a
decode that is not the model's own output.

Exact match scores what the model produces on its own: ``fairseq-entropy run`` decodes with
``--beam 1`` (greedy) and a length limit above the longest reference.  Options that feed the
model the reference (``--score-reference``, ``--prefix-size``), draw at random
(``--sampling``, ``--retain-dropout``) or print several hypotheses per command (``--nbest``)
give a number that is not that accuracy; a beam wider than 1 gives another decode of the same
model, kept apart from greedy decodes (:func:`decoding_label`).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Optional

from ..errors import UserError
from ..files import iter_text_lines

#: the generation options a ``score.json`` records (``decoding``), by fairseq's names
RECORDED = ("beam", "max_len_a", "max_len_b", "lenpen", "unkpen", "min_len",
            "no_repeat_ngram_size", "match_source_len")

#: options that make a decode other than the model's own: (option, value it must have, flag)
REFUSED = (("score_reference", False, "--score-reference"), ("prefix_size", 0, "--prefix-size"),
           ("sampling", False, "--sampling"), ("retain_dropout", False, "--retain-dropout"),
           ("nbest", 1, "--nbest"))


def read_generation_options(log: str | os.PathLike) -> Optional[dict]:
    """The ``generation`` section of the configuration that fairseq-generate logs when it
    starts (a line holding the configuration as a Python dict), from the log ``log``; None
    when the file does not exist or holds no such line (a decode run without its log, or
    another tool's output).

    Raises:
        DataFormatError: the log is not UTF-8 text.
    """
    if not Path(log).is_file():
        return None
    found = None
    for _, line in iter_text_lines(log):
        if "'generation': {" not in line or "{'_name'" not in line:
            continue
        try:
            config = ast.literal_eval(line[line.index("{'_name'"):].strip())
        except (ValueError, SyntaxError):
            continue
        if isinstance(config, dict) and isinstance(config.get("generation"), dict):
            found = config["generation"]
    return found


def check_decoding(options: Optional[dict], where: str) -> Optional[dict]:
    """Refuse a decode made with an option of :data:`REFUSED`; return the options of
    :data:`RECORDED` (None when ``options`` is None: not known).

    Args:
        options: :func:`read_generation_options` of the decode's log.
        where: the log's path, for the message.

    Raises:
        UserError: naming the option, the log and the fix.
    """
    if options is None:
        return None
    for key, wanted, flag in REFUSED:
        value = options.get(key, wanted)
        if value not in (wanted, None):
            raise UserError(f"{where}: the decode was made with {flag} {value!r} (fairseq's "
                            f"{key}), so its hypotheses are not the model's own greedy or beam "
                            "output and their exact match is not the model's accuracy. Fix: "
                            f"decode again without {flag} (fairseq-entropy run decodes with "
                            "--beam 1)")
    return {k: options.get(k) for k in RECORDED}


def decoding_label(decoding: Optional[dict]) -> str:
    """The part of a cell's label a decode adds: ``beam=<K>`` for a beam wider than 1, else
    ``""`` (greedy, or not recorded)."""
    beam = decoding.get("beam") if isinstance(decoding, dict) else None
    return f"beam={beam}" if isinstance(beam, int) and beam > 1 else ""
