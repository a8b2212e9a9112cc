"""The ``systematicity`` task: fairseq translation on entropy-controlled SCAN-style data.

Extends fairseq's ``translation`` task (Wold et al., arXiv 2505.13089, Sec. 4) with

* validation-time exact-match accuracy by greedy decoding, logged as ``seq_acc`` so that
  ``--best-checkpoint-metric seq_acc --maximize-best-checkpoint-metric`` selects checkpoints on
  the validation split (never on the test set);
* a log line with the training set's slot entropies read from the ``manifest.json`` that
  ``fairseq-entropy binarize`` copies next to the binarized data;
* the grammar and a hash of the data's dictionary, recorded in the task config and the task
  state of every checkpoint, so that decoding data binarized with another dictionary stops
  with an error naming both dictionaries before fairseq loads the weights;
* a progress line while training, at least every ``--progress-interval`` seconds: epoch k/N,
  updates, seconds elapsed and left, and the last validation ``seq_acc``;
* on a host without CUDA, fairseq's per-update reseeding seeds the CPU generator only
  (:func:`install_cpu_seeding`);
* dictionaries of class :class:`SymbolDictionary`, whose ``string`` (called several times per
  sentence by ``fairseq-generate``) converts a tensor of ids in one call.
"""

import hashlib
import json
import logging
import math
import os
from argparse import Namespace
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from fairseq import utils
from fairseq.data import BaseWrapperDataset, Dictionary, data_utils
from fairseq.logging import metrics
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II, OmegaConf, open_dict

from ..errors import UserError
from ..progress import TrainingProgress
from ..scan.binarize import dictionary_words
from ..scan.grammar import Grammar

logger = logging.getLogger(__name__)


class _CpuTorchSeed(utils.set_torch_seed):
    """``fairseq.utils.set_torch_seed`` for a host without CUDA (or XLA): seeds the CPU
    generator, which is the only one such a process draws from.

    ``torch.manual_seed`` also queues the seeding of every uninitialised accelerator module,
    formatting the Python stack for each, and fairseq's ``Trainer`` reseeds before every
    update: about 2.7 ms per update of a small model on one core.  The CPU generator ends in
    the same state, so training draws the same random numbers.  Usable as a context manager
    (restores the previous state on exit), as the class it replaces.
    """

    def __init__(self, seed):
        assert isinstance(seed, int)
        self.rng_state = utils.get_rng_state()
        torch.default_generator.manual_seed(seed)


def install_cpu_seeding() -> bool:
    """Replace ``fairseq.utils.set_torch_seed`` by :class:`_CpuTorchSeed` when this process
    has neither CUDA nor XLA; returns whether it did (idempotent)."""
    if torch.cuda.is_available() or getattr(utils, "xm", None) is not None:
        return False
    utils.set_torch_seed = _CpuTorchSeed
    return True


class SymbolDictionary(Dictionary):
    """``fairseq.data.Dictionary`` whose :meth:`string` reads a tensor of ids with one
    ``tolist()`` instead of one 0-d tensor per token.

    fairseq's ``string`` iterates over the tensor element by element and compares each
    0-d tensor with the special indices; ``fairseq-generate`` calls it for the source, the
    reference and every hypothesis, which made it the largest cost of writing a test set's
    output.  Same arguments, same result (tested against fairseq's implementation).
    """

    def string(self, tensor, bpe_symbol=None, escape_unk=False, extra_symbols_to_ignore=None,
               unk_string=None, include_eos=False, separator=" "):
        """Token ids -> text, as ``fairseq.data.Dictionary.string``.

        Args:
            tensor: 1-D ids (a tensor or any iterable of ints), or a 2-D tensor, one line per
                row (rows get fairseq's defaults for ``unk_string`` and ``separator``, as in
                fairseq).
            bpe_symbol: post-processing for ``data_utils.post_process`` ("sentencepiece", ...).
            escape_unk: write ``<unk>`` as ``<<unk>>``.
            extra_symbols_to_ignore: ids left out; end-of-sentence is left out unless
                ``include_eos``, beginning-of-sentence always.
            unk_string: text for ``<unk>`` (overrides ``escape_unk``).
        """
        if torch.is_tensor(tensor) and tensor.dim() == 2:
            return "\n".join(self.string(t, bpe_symbol, escape_unk, extra_symbols_to_ignore,
                                          include_eos=include_eos) for t in tensor)
        ignore = {utils.item(i) for i in (extra_symbols_to_ignore or [])}
        if not include_eos:
            ignore.add(self.eos())
        if hasattr(self, "bos_index"):
            ignore.add(self.bos())
        ids = tensor.tolist() if torch.is_tensor(tensor) else [utils.item(i) for i in tensor]
        unk = self.unk()
        unk_text = unk_string if unk_string is not None else self.unk_string(escape_unk)
        symbols, n = self.symbols, len(self.symbols)
        sent = separator.join(unk_text if i == unk else (symbols[i] if i < n else self.unk_word)
                              for i in ids if i not in ignore)
        return data_utils.post_process(sent, bpe_symbol)


@dataclass
class SystematicityConfig(TranslationConfig):
    """Options of the ``systematicity`` task: fairseq's translation options plus these."""

    eval_seq_acc: bool = field(
        default=False,
        metadata={"help": "decode the validation set greedily and log exact-match accuracy "
                          "as seq_acc"},
    )
    eval_seq_acc_max_len_b: int = field(
        default=60,
        metadata={"help": "maximum output length when decoding for seq_acc (the longest "
                          "output of the paper's grammar has 48 actions)"},
    )
    random_batches: bool = field(
        default=False,
        metadata={"help": "draw training batches uniformly at random and anew every epoch "
                          "(as a PyTorch DataLoader with shuffle=True) instead of fairseq's "
                          "length-sorted batches, whose members share a length and hence "
                          "mostly a syntactic template"},
    )
    batch_pool: int = field(
        default=0,
        metadata={"help": "padding-aware random batches: every epoch, cut a random permutation "
                          "of the training set into pools of this many batches, sort each "
                          "pool by target then source length, and cut it into batches (whose "
                          "order fairseq shuffles); 0 draws the batches uniformly at random. "
                          "Needs --random-batches and --batch-size"},
    )
    length_chunks: int = field(
        default=1,
        metadata={"help": "compute every training batch as up to this many chunks of "
                          "sentences of similar target length (the batch sorted by target "
                          "length and cut into equal parts, each padded only to its own "
                          "longest sentence), accumulating their gradients before the one "
                          "update: the same batches, loss and gradient as 1 (up to float "
                          "rounding and dropout draws) with less padding computed. For models "
                          "whose outputs do not depend on the padding of the batch (all of "
                          "this plugin's)"},
    )
    rebuild_batches: bool = field(
        default=False,
        metadata={"help": "rebuild the batches every epoch (set by --random-batches)"},
    )
    progress_interval: float = field(
        default=30.0,
        metadata={"help": "while training, log a progress line (epoch k/N, updates, seconds "
                          "elapsed and left, last validation seq_acc) at least every this many "
                          "seconds; 0 turns it off"},
    )
    dictionary_grammar: Optional[str] = field(
        default=None,
        metadata={"help": "grammar whose fixed dictionary the data uses (paper, scan or "
                          "custom); set from the data's dictionary and recorded in checkpoints"},
    )
    dictionary_hash: Optional[str] = field(
        default=None,
        metadata={"help": "sha256 (first 16 hex digits) of the data's source and target "
                          "dictionaries; set from the data and recorded in checkpoints"},
    )
    # the training schedule, read for the progress line (fairseq's own options; no help text
    # so that fairseq does not add them to the command line a second time)
    max_update: int = II("optimization.max_update")
    max_epoch: int = II("optimization.max_epoch")
    batch_size: Optional[int] = II("dataset.batch_size")
    max_tokens: Optional[int] = II("dataset.max_tokens")


class RandomOrderDataset(BaseWrapperDataset):
    """Wraps a training set so that ``ordered_indices`` is a random permutation.

    fairseq seeds numpy with (seed + epoch) around the call, so the order is reproducible and,
    with ``rebuild_batches``, different in every epoch.  fairseq's ``batch_by_size`` then cuts
    the order into consecutive batches of ``--batch-size`` sentences.

    Args:
        dataset: a ``LanguagePairDataset`` (``src_sizes`` and ``tgt_sizes`` are read).
        pool_sentences: 0 for a plain permutation (uniformly random batches).  Otherwise the
            permutation is cut into consecutive pools of this many sentences (a multiple of
            the batch size: K batches) and each pool is sorted by target length, then source
            length, stably.  The batches are then as random in membership as their pool but
            nearly uniform in length, so far fewer padded positions are computed; with pools
            a multiple of the batch size the number of batches is unchanged.
    """

    def __init__(self, dataset, pool_sentences: int = 0):
        super().__init__(dataset)
        if pool_sentences < 0:
            raise ValueError(f"pool_sentences must be >= 0, got {pool_sentences}")
        self.pool_sentences = pool_sentences

    def ordered_indices(self):
        order = np.random.permutation(len(self.dataset))
        if self.pool_sentences <= 1:
            return order
        tgt = np.asarray(self.dataset.tgt_sizes)
        src = np.asarray(self.dataset.src_sizes)
        pools = []
        for start in range(0, len(order), self.pool_sentences):
            pool = order[start:start + self.pool_sentences]
            pools.append(pool[np.lexsort((src[pool], tgt[pool]))])
        return np.concatenate(pools) if pools else order

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return False


def dictionary_hash(*dictionaries) -> str:
    """First 16 hex digits of the sha256 of the dictionaries' symbols (ids in order)."""
    h = hashlib.sha256()
    for d in dictionaries:
        h.update("\n".join(d.symbols).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def dictionary_grammar(dictionary) -> str:
    """``paper`` or ``scan`` if ``dictionary`` is that grammar's fixed dictionary (the words of
    :func:`fairseq_entropy.scan.binarize.dictionary_words` after fairseq's special symbols),
    else ``custom``."""
    words = dictionary.symbols[dictionary.nspecial:]
    for name in ("paper", "scan"):
        if words == dictionary_words(Grammar.by_name(name)):
            return name
    return "custom"


class DictionaryMismatchError(UserError, RuntimeError):
    """A checkpoint was trained on data with another dictionary than the data to decode."""


class FirstEpochOrderDataset(BaseWrapperDataset):
    """Wraps a training set so that its batches are composed as in epoch 1, whatever the epoch.

    Without ``--random-batches`` fairseq composes the length-sorted batches once, when the
    training iterator is created, from ``ordered_indices`` under numpy seeded with
    ``seed + epoch``, and keeps them for the rest of the run (only their order is reshuffled
    every epoch). An uninterrupted run creates the iterator at epoch 1; a run resumed from
    ``checkpoint_last.pt`` creates it at the resumed epoch, and so trains on other batches
    (same lengths, other commands). :meth:`SystematicityTask.get_batch_iterator` sets
    ``order_seed`` to ``seed + 1``, the seed of epoch 1, so both runs see the same batches.
    """

    def __init__(self, dataset):
        super().__init__(dataset)
        self.order_seed = None

    def ordered_indices(self):
        if self.order_seed is None:
            return self.dataset.ordered_indices()
        with data_utils.numpy_seed(self.order_seed):
            return self.dataset.ordered_indices()


def split_by_length(sample: dict, chunks: int, pad: int, left_pad_source: bool = True):
    """Cut a collated translation batch into up to ``chunks`` batches of similar target length.

    The sentences are sorted by target length (stably) and cut into ``chunks`` parts of equal
    size (``torch.tensor_split``); every tensor of the batch is indexed with its part and the
    padding columns no sentence of the part needs are dropped (sources on the left with
    ``left_pad_source``, else on the right; targets and ``prev_output_tokens`` on the right).
    ``ntokens`` and ``nsentences`` are recomputed per part, so the parts' losses add up to
    the batch's.

    Args:
        sample: fairseq's ``LanguagePairDataset.collater`` output (``id`` [B], ``net_input``
            with ``src_tokens`` [B, S], ``src_lengths`` [B], ``prev_output_tokens`` [B, T];
            ``target`` [B, T]).
        chunks: the number of parts (at most B; 1 returns ``[sample]``).
        pad: the padding index.

    Returns:
        a list of batches of the same structure.
    """
    target = sample["target"]
    if chunks <= 1 or target.size(0) <= 1:
        return [sample]
    lengths = target.ne(pad).sum(1)
    order = torch.sort(lengths, stable=True).indices
    out = []
    for idx in torch.tensor_split(order, min(chunks, target.size(0))):
        t_len = int(lengths[idx].max())
        net = sample["net_input"]
        src = net["src_tokens"].index_select(0, idx)
        s_len = int(src.ne(pad).sum(1).max())
        src = (src[:, src.size(1) - s_len:] if left_pad_source else src[:, :s_len]).contiguous()
        sub_net = {**net, "src_tokens": src,
                   "src_lengths": net["src_lengths"].index_select(0, idx)}
        if "prev_output_tokens" in net:
            sub_net["prev_output_tokens"] = net["prev_output_tokens"].index_select(0, idx)[
                :, :t_len].contiguous()
        sub_target = target.index_select(0, idx)[:, :t_len].contiguous()
        out.append({**sample, "id": sample["id"].index_select(0, idx), "net_input": sub_net,
                    "target": sub_target, "nsentences": len(idx),
                    "ntokens": int(sub_target.ne(pad).sum())})
    return out


def exact_match(hyp_tokens: torch.Tensor, ref_tokens: torch.Tensor, pad: int, eos: int) -> bool:
    """Whether two token sequences are equal once padding and end-of-sentence are stripped."""
    def strip(t):
        t = t[(t != pad) & (t != eos)]
        return t.tolist()
    return strip(hyp_tokens) == strip(ref_tokens)


@register_task("systematicity", dataclass=SystematicityConfig)
class SystematicityTask(TranslationTask):
    """Translation task for systematic-generalization data (see module docstring)."""

    cfg: SystematicityConfig

    @classmethod
    def setup_task(cls, cfg: SystematicityConfig, **kwargs):
        install_cpu_seeding()
        task = super().setup_task(cfg, **kwargs)
        first = utils.split_paths(cfg.data)[0]
        manifest = os.path.join(first, "manifest.json")
        if os.path.exists(manifest):
            with open(manifest) as f:
                info = json.load(f)
            task.manifest = info
            train = info.get("slots", {}).get("train", {}).get("entropy_bits", {})
            logger.info(
                "training set %s: %s, controlled slot %s, target %s bits, measured slot "
                "entropies first=%s second=%s bits",
                info.get("level", "?"), info.get("experiment", "?"),
                info.get("controlled_slot", "?"), info.get("target_entropy_bits", "?"),
                train.get("first"), train.get("second"))
        else:
            task.manifest = None
            logger.info("no manifest.json in %s: training-set entropies unknown", first)
        task.record_dictionaries(cfg)
        task.data_dir = first
        task.progress = None
        task.valid_counts = [0, 0]
        return task

    @classmethod
    def load_dictionary(cls, filename):
        """The dictionary in ``filename`` (fairseq's ``dict.txt`` format) as a
        :class:`SymbolDictionary`."""
        return SymbolDictionary.load(filename)

    def record_dictionaries(self, cfg) -> None:
        """Set ``dictionary_grammar`` and ``dictionary_hash`` in the task config.

        fairseq's ``tasks.setup_task`` hands the task a merged copy of ``cfg.task`` whose
        parent is the root config that the trainer saves in checkpoints; the values are set in
        both, so that every checkpoint's ``cfg.task`` records them.
        """
        values = {"dictionary_grammar": dictionary_grammar(self.tgt_dict),
                  "dictionary_hash": dictionary_hash(self.src_dict, self.tgt_dict)}
        targets = [self.cfg]
        parent = cfg._get_parent() if OmegaConf.is_config(cfg) else None
        if OmegaConf.is_config(parent) and OmegaConf.is_config(parent.get("task")):
            targets.append(parent.task)
        for target in targets:
            with open_dict(target) if OmegaConf.is_config(target) else nullcontext():
                for key, value in values.items():
                    setattr(target, key, value)

    def dictionary_record(self) -> dict:
        """Grammar, hash and sizes of this task's dictionaries (saved in checkpoints)."""
        return {"grammar": self.cfg.dictionary_grammar, "hash": self.cfg.dictionary_hash,
                "source_size": len(self.src_dict), "target_size": len(self.tgt_dict)}

    def state_dict(self):
        """fairseq's task state plus :meth:`dictionary_record` under ``dictionaries``."""
        return {**super().state_dict(), "dictionaries": self.dictionary_record()}

    def load_state_dict(self, state_dict):
        """Check a checkpoint's dictionaries against the data's, then load the task state.

        fairseq calls this with the checkpoint's task state before it builds the model and
        loads the weights (``checkpoint_utils.load_model_ensemble_and_task``).

        Raises:
            DictionaryMismatchError: the checkpoint was trained with other dictionaries; the
                message gives both grammars, hashes and sizes and the fix.
        """
        state_dict = dict(state_dict)
        theirs = state_dict.pop("dictionaries", None)
        if theirs is not None:
            mine = self.dictionary_record()
            if theirs.get("hash") != mine["hash"]:
                fix = (f"re-binarize the data with --grammar {theirs.get('grammar')} "
                       f"(fairseq-entropy binarize ... --grammar {theirs.get('grammar')})"
                       if theirs.get("grammar") in ("paper", "scan") else
                       "binarize the data with the dictionary the model was trained on")
                raise DictionaryMismatchError(
                    f"the checkpoint was trained on data with the {theirs.get('grammar')} "
                    f"grammar's dictionary ({theirs.get('source_size')} source / "
                    f"{theirs.get('target_size')} target symbols, hash {theirs.get('hash')}), "
                    f"but {self.data_dir} uses the {mine['grammar']} grammar's dictionary "
                    f"({mine['source_size']} / {mine['target_size']} symbols, hash "
                    f"{mine['hash']}); the token ids do not match. Fix: {fix}, or decode "
                    f"data binarized with --grammar {theirs.get('grammar')}")
        super().load_state_dict(state_dict)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        if self.cfg.batch_pool and split == self.cfg.train_subset:
            if self.cfg.batch_pool < 0 or not self.cfg.random_batches or \
                    not self.cfg.batch_size:
                raise ValueError(
                    f"--batch-pool {self.cfg.batch_pool} needs a positive pool size, "
                    f"--random-batches and --batch-size (got random_batches="
                    f"{self.cfg.random_batches}, batch_size={self.cfg.batch_size}). Fix: add "
                    "--random-batches --batch-size B, or drop --batch-pool")
        if self.cfg.random_batches and split == self.cfg.train_subset:
            self.cfg.rebuild_batches = True
            pool = self.cfg.batch_pool * self.cfg.batch_size if self.cfg.batch_pool else 0
            self.datasets[split] = RandomOrderDataset(self.datasets[split], pool)
        elif split == self.cfg.train_subset:
            self.datasets[split] = FirstEpochOrderDataset(self.datasets[split])

    def begin_epoch(self, epoch, model):
        """Start the progress clock's epoch ``epoch`` (fairseq hook)."""
        super().begin_epoch(epoch, model)
        if self.progress is None:
            self.progress = self._new_progress()
        self.progress.begin_epoch(epoch, getattr(self, "_last_update", None))

    def _new_progress(self) -> TrainingProgress:
        def option(name):  # an int, or 0 when unset (or not resolvable outside fairseq-train)
            try:
                value = getattr(self.cfg, name)
            except Exception:
                return 0
            return value if isinstance(value, int) else 0

        estimate = None
        train = self.datasets.get(self.cfg.train_subset)
        if train is not None and option("batch_size") and not option("max_tokens"):
            estimate = math.ceil(len(train) / option("batch_size"))
        return TrainingProgress(self.cfg.progress_interval, option("max_update"),
                                option("max_epoch"), estimate)

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """fairseq's training step (with ``--length-chunks K``, over the K length-sorted parts
        of the batch, see :func:`split_by_length`), then the progress line when one is due."""
        if self.cfg.length_chunks > 1 and sample["target"].size(0) > 1:
            out = self._chunked_train_step(sample, model, criterion, optimizer, update_num,
                                           ignore_grad)
        else:
            out = super().train_step(sample, model, criterion, optimizer, update_num,
                                     ignore_grad)
        if self.progress is None:
            self.progress = self._new_progress()
        self._last_update = update_num + 1  # updates completed once this step is done
        correct, total = self.valid_counts
        if total:
            self.progress.seq_acc = correct / total
        line = self.progress.step(update_num)
        if line:
            logger.info(line)
        return out

    def _chunked_train_step(self, sample, model, criterion, optimizer, update_num,
                            ignore_grad=False):
        """fairseq's ``train_step`` on each part of :func:`split_by_length`, the gradients
        accumulated: returns the summed loss, sample size and logging outputs, which fairseq
        then treats as those of the whole batch (it divides the gradient by the sample size)."""
        total_loss, total_size, logs = 0.0, 0, {}
        for part in split_by_length(sample, self.cfg.length_chunks, self.tgt_dict.pad(),
                                    self.cfg.left_pad_source):
            loss, sample_size, log = super().train_step(part, model, criterion, optimizer,
                                                        update_num, ignore_grad)
            total_loss = total_loss + loss.detach()
            total_size += sample_size
            for key, value in log.items():
                if isinstance(value, (int, float, torch.Tensor)) and key in logs:
                    logs[key] = logs[key] + value
                else:
                    logs.setdefault(key, value)
        return total_loss, total_size, logs

    def begin_valid_epoch(self, epoch, model):
        """Reset the validation exact-match counts of the progress line (fairseq hook)."""
        super().begin_valid_epoch(epoch, model)
        self.valid_counts = [0, 0]

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if self.cfg.eval_seq_acc:
            self.sequence_generator = self.build_generator(
                [model], Namespace(beam=1, max_len_a=0, max_len_b=self.cfg.eval_seq_acc_max_len_b,
                                   min_len=1, sampling=False, unnormalized=False))
        return model

    def valid_step(self, sample, model, criterion):
        loss, sample_size, logging_output = super().valid_step(sample, model, criterion)
        if self.cfg.eval_seq_acc:
            hyps = self.inference_step(self.sequence_generator, [model], sample, prefix_tokens=None)
            pad, eos = self.tgt_dict.pad(), self.tgt_dict.eos()
            correct = sum(
                exact_match(hyps[i][0]["tokens"].cpu(), sample["target"][i].cpu(), pad, eos)
                for i in range(len(hyps)))
            logging_output["_seq_acc_correct"] = correct
            logging_output["_seq_acc_total"] = len(hyps)
            self.valid_counts[0] += correct
            self.valid_counts[1] += len(hyps)
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if self.cfg.eval_seq_acc:
            correct = sum(log.get("_seq_acc_correct", 0) for log in logging_outputs)
            total = sum(log.get("_seq_acc_total", 0) for log in logging_outputs)
            if total > 0:
                metrics.log_scalar("_seq_acc_correct", correct)
                metrics.log_scalar("_seq_acc_total", total)
                metrics.log_derived(
                    "seq_acc",
                    lambda meters: round(
                        meters["_seq_acc_correct"].sum / meters["_seq_acc_total"].sum, 4)
                    if meters["_seq_acc_total"].sum > 0 else 0.0)

    def get_batch_iterator(self, dataset, *args, seed=1, **kwargs):
        """fairseq's batch iterator; a :class:`FirstEpochOrderDataset` gets the seed of epoch 1.

        With this, a run resumed from a checkpoint trains on the same batches as an
        uninterrupted run (fairseq restores the model, optimizer, scheduler, epoch and
        iterator position, and reseeds torch with ``seed + update`` before every update, so
        dropout is restored too). ``seed`` must be passed by keyword, as fairseq does.
        """
        if isinstance(dataset, FirstEpochOrderDataset):
            dataset.order_seed = seed + 1
        return super().get_batch_iterator(dataset, *args, seed=seed, **kwargs)
