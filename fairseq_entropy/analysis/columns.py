"""The names every analysis module shares: result columns, checkpoint labels, held-out slots,
and :class:`ScoreError`.

A result row (one per scored run and checkpoint; a line of ``results.tsv``) is a dict with the
keys :data:`RESULT_COLUMNS` + :data:`GRADED_COLUMNS` (+ ``path``, the file it came from).
"""

from __future__ import annotations

from ..errors import UserError
from ..scan.grammar import CONJUNCTIONS

#: columns of ``results.tsv``, one row per score.json
RESULT_COLUMNS = ("experiment", "preset", "model", "n_train", "level", "entropy_bits",
                  "checkpoint", "schedule", "seed", "data_seed", "accuracy", "updates",
                  "epochs", "preset_max_update", "model_family", "preset_config")
#: result columns a score may lack (None in its row); a ``results.tsv`` may lack the columns
#: of :data:`SCHEDULE_COLUMNS` and ``model_family`` (older aggregates; ``model_family``:
#: ``decoder-only`` or ``encoder-decoder``, None in scores written before it was recorded)
OPTIONAL_RESULT_COLUMNS = ("entropy_bits", "data_seed", "schedule", "updates", "epochs",
                           "preset_max_update", "model_family", "preset_config")
#: ``model_family`` of a score: a decode of lm-format data (``provenance.model_family``) ...
DECODER_ONLY = "decoder-only"
#: ... and of pair data
ENCODER_DECODER = "encoder-decoder"
#: the agreement note of a decoder-only cell: the paper trains no decoder-only model, so its
#: cells are compared with the paper's encoder-decoder (``paper.paper_model_name``)
PAPER_IS_ENCODER_DECODER = "paper value: the encoder-decoder (the paper has no decoder-only model)"
#: the schedule of a run (``score.json``'s ``schedule``): its label (the cell key's part,
#: ``schedules.schedule_label``; ``unknown`` when not recorded), the updates and epochs done,
#: the preset's own ``max_update`` on the level and ``preset_config``, the first 8 hex digits
#: of the hash of the preset's arguments with the schedule left out (the same at every level
#: of one preset; empty when the run's arguments could not be verified against the preset)
SCHEDULE_COLUMNS = ("schedule", "updates", "epochs", "preset_max_update", "preset_config")
#: the schedule label of a score without a recorded schedule
UNKNOWN_SCHEDULE = "unknown"
#: the keys of ``score.json``'s ``by_shared_verb`` record: the test commands whose two clauses
#: have the same verb, and the others
SHARED_VERB_KEYS = ("same_verb", "different_verbs")
#: graded metrics of ``score.json`` (its ``graded`` record) and the exact match of the
#: commands of each conjunction (its ``by_conjunction`` record: ``accuracy_and``,
#: ``accuracy_after``) and of each :data:`SHARED_VERB_KEYS` subset (``by_shared_verb``:
#: ``accuracy_same_verb``, ``accuracy_different_verbs``), carried into ``results.tsv`` and
#: averaged over seeds in ``summary.tsv``; empty for score files written without them
GRADED_COLUMNS = ("clause_accuracy", "correct_except_restricted_clause", "chrf", "bleu",
                  *(f"accuracy_{c}" for c in CONJUNCTIONS),
                  *(f"accuracy_{k}" for k in SHARED_VERB_KEYS))
#: what identifies a group of runs that differ only by their seed; ``results.tsv`` is sorted
#: by these columns, then by seed
GROUP_COLUMNS = ("experiment", "preset", "n_train", "level", "checkpoint", "schedule")
#: checkpoint labels a run is scored with: the last one, the best on the validation split
#: (seq_acc), and the one with the lowest loss on the test split (the paper authors'
#: selection: their validation file was the test set; ``SELECT=test-loss`` in
#: ``recipes/train_level.sh``), a diagnostic of the paper's numbers, not an estimate of
#: generalization
CHECKPOINT_LABELS = ("last", "best", "test-loss")

HELD_OUT_SLOT = {"exp1": "first", "exp2": "second"}
"""The slot in which the test set executes the restricted verb (never seen there in training)."""


class ScoreError(UserError, ValueError):
    """Unreadable or inconsistent generate output / result files."""
