"""The ``systematicity_lm`` task: decoder-only language models on the lm format of
entropy-controlled data (``fairseq-entropy binarize --format lm``).

Each sample is one line ``command <sep> actions </s>``
(:class:`~fairseq_entropy.data.prompt_lines.PromptLineDataset`): the model reads the line
left to right and the loss counts only the predictions of the actions and ``</s>``; the
targets of the prompt (the command's words and ``<sep>``) are padding, and ``ntokens``, the
criterion's normaliser, counts the real targets only.  Decoding (``fairseq-generate``,
``fairseq-interactive``, ``--eval-seq-acc``) continues each command's prompt greedily
(:class:`~fairseq_entropy.tasks.prompt_decoding.PromptGreedyGenerator`) and never reads the
reference.

Everything else is the ``systematicity`` task's, inherited: ``--eval-seq-acc``, random batches
(``--random-batches``, ``--batch-pool``) and epoch-1 batches on resume, progress lines, the
dictionary and data records in checkpoints and their check before the weights load.  The
model is any fairseq decoder-only model: the plugin's ``scan_transformer_lm`` or fairseq's
``transformer_lm``.
"""

import logging
import os
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.data import data_utils
from fairseq.tasks import register_task

from ..data.dictionary import SymbolDictionary
from ..data.prompt_lines import PromptDictionary, PromptLineDataset
from ..errors import UserError
from .prompt_decoding import PromptGreedyGenerator
from .seeding import install_cpu_seeding
from .systematicity import SystematicityConfig, SystematicityTask

logger = logging.getLogger(__name__)


class LmDataError(UserError, ValueError):
    """Data that the ``systematicity_lm`` task cannot read (pair data, a missing split)."""


@dataclass
class SystematicityLmConfig(SystematicityConfig):
    """Options of the ``systematicity_lm`` task: those of ``systematicity`` (the translation
    options among them are unused) plus the options fairseq's language models read."""

    tokens_per_sample: int = field(
        default=256, metadata={"help": "longest line in tokens (fairseq's transformer_lm reads "
                                       "it as its position table's size)"})
    add_bos_token: bool = field(
        default=False, metadata={"help": "unused: lines start with </s> as in fairseq's "
                                         "language modeling (read by transformer_lm)"})


@register_task("systematicity_lm", dataclass=SystematicityLmConfig)
class SystematicityLmTask(SystematicityTask):
    """Decoder-only training and decoding on lm-format data (see module docstring)."""

    cfg: SystematicityLmConfig

    @classmethod
    def setup_task(cls, cfg: SystematicityLmConfig, **kwargs):
        """Load ``dict.txt`` of the data twice: as a :class:`PromptDictionary`, the source
        dictionary (a line printed as its source is its command: fairseq-generate's ``S-``
        lines), and as a plain :class:`SymbolDictionary` with the same symbols, the target
        dictionary, which prints a hypothesis whole (``H-`` lines): a generated ``<sep>``
        stays in it, so such a hypothesis never matches a reference.

        Raises:
            LmDataError: the data directory has no ``dict.txt`` (pair data: dict.in.txt).
        """
        install_cpu_seeding()
        first = utils.split_paths(cfg.data)[0]
        path = os.path.join(first, "dict.txt")
        if not os.path.isfile(path):
            raise LmDataError(
                f"{first} holds no dict.txt: not lm-format data (the systematicity task's "
                "pair data has dict.in.txt). Fix: binarize the level with fairseq-entropy "
                "binarize --format lm")
        dictionary = PromptDictionary.load(path)
        if dictionary.index(PromptDictionary.sep_word) == dictionary.unk():
            raise LmDataError(f"{path} has no <sep>: not lm-format data. Fix: binarize the "
                              "level with fairseq-entropy binarize --format lm")
        logger.info("dictionary %s: %d types", path, len(dictionary))
        if cfg.length_chunks > 1:
            raise LmDataError(f"--length-chunks {cfg.length_chunks} applies to the "
                              "systematicity task's pair data. Fix: drop --length-chunks")
        task = cls(cfg, dictionary, SymbolDictionary.load(path))
        task.read_manifest(cfg)
        return task

    def dictionary_record(self) -> dict:
        """:meth:`SystematicityTask.dictionary_record` with ``format: lm``."""
        return {**super().dictionary_record(), "format": "lm"}

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        """Load ``{split}.{bin,idx}`` as a :class:`PromptLineDataset`.

        Raises:
            LmDataError: the split is missing, or a line has no ``<sep>``.
        """
        path = os.path.join(utils.split_paths(self.cfg.data)[0], split)
        lines = data_utils.load_indexed_dataset(path, self.tgt_dict, combine=combine)
        if lines is None:
            raise LmDataError(f"{path}.bin not found: no {split} split. Fix: binarize the "
                              "level with fairseq-entropy binarize --format lm")
        try:
            dataset = PromptLineDataset(lines, lines.sizes, self.tgt_dict,
                                        shuffle=split == self.cfg.train_subset)
        except ValueError as e:
            raise LmDataError(f"{path}: {e}") from None
        self.datasets[split] = dataset
        self.order_training_set(split)

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        """Raw commands (``fairseq-interactive``) as prompts ``</s> command <sep>``."""
        return PromptLineDataset.from_commands(src_tokens, self.tgt_dict)

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        """A :class:`PromptGreedyGenerator` (greedy; ``max_len_a``, ``max_len_b`` read).

        Raises:
            LmDataError: a beam wider than 1, or sampling, asked for.
        """
        if getattr(args, "beam", 1) != 1 or getattr(args, "sampling", False):
            raise LmDataError("the systematicity_lm task decodes greedily. Fix: pass --beam 1 "
                              "and no --sampling")
        return PromptGreedyGenerator(models, self.tgt_dict, getattr(args, "max_len_a", 0),
                                     getattr(args, "max_len_b", self.cfg.eval_seq_acc_max_len_b))

    def max_positions(self):
        """The longest line (``--tokens-per-sample``)."""
        return self.cfg.tokens_per_sample
