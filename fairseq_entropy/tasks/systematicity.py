"""The ``systematicity`` task: fairseq translation on entropy-controlled SCAN-style data.

Extends fairseq's ``translation`` task (Wold et al., arXiv 2505.13089, Sec. 4) with

* validation-time exact-match accuracy by greedy decoding, logged as ``seq_acc`` so that
  ``--best-checkpoint-metric seq_acc --maximize-best-checkpoint-metric`` selects checkpoints on
  the validation split (never on the test set); the comparison is
  :func:`fairseq_entropy.data.exact_match.exact_match`;
* a log line with the training set's slot entropies read from the ``manifest.json`` that
  ``fairseq-entropy binarize`` copies next to the binarized data;
* the grammar and a hash of the data's dictionary, recorded in the task config and the task
  state of every checkpoint, so that decoding data binarized with another dictionary stops
  with an error naming both dictionaries before fairseq loads the weights (the record and the
  check: :mod:`fairseq_entropy.data.dictionary`);
* the training data's identity (the SHA-256 of the data directory's ``manifest.json`` and
  the experiment, level and data seed it names) and the hash of the preset's fairseq-train
  arguments (``--train-args-sha256``, given by ``fairseq-entropy run``), recorded in the
  task config and the task state of every checkpoint; loading a checkpoint logs that record
  (``checkpoint record: {json}``), so that ``fairseq-generate``'s log keeps it beside the
  decode (read back by :mod:`fairseq_entropy.analysis.provenance`);
* a progress line while training, at least every ``--progress-interval`` seconds: epoch k/N,
  updates, seconds elapsed and left, and the last validation ``seq_acc``
  (:class:`fairseq_entropy.progress.TrainingProgress`);
* training batches drawn at random every epoch with ``--random-batches`` (and
  ``--batch-pool``: :mod:`fairseq_entropy.data.random_order_dataset`), otherwise fairseq's
  length-sorted batches composed as in epoch 1 even in a resumed run
  (:mod:`fairseq_entropy.data.first_epoch_order_dataset`);
* ``--length-chunks K``: every training batch computed as K parts of similar target length
  (:mod:`fairseq_entropy.data.length_chunks`);
* on a host without CUDA, fairseq's per-update reseeding seeds the CPU generator only
  (:func:`fairseq_entropy.tasks.seeding.install_cpu_seeding`);
* dictionaries of class :class:`fairseq_entropy.data.dictionary.SymbolDictionary`, whose
  ``string`` (called several times per sentence by ``fairseq-generate``) converts a tensor of
  ids in one call.
"""

import json
import logging
import math
import os
from argparse import Namespace
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq import utils
from fairseq.logging import metrics
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II, OmegaConf, open_dict

from ..data import (FirstEpochOrderDataset, RandomOrderDataset, SymbolDictionary,
                    check_dictionaries, dictionary_grammar, dictionary_hash, exact_match,
                    split_by_length)
from ..progress import TrainingProgress
from ..scan.manifests import manifest_sha256
from .seeding import install_cpu_seeding

logger = logging.getLogger(__name__)


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
                          "seconds, the first one after at most 5 s of training (so that a "
                          "sweep tells the time left early); 0 turns it off"},
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
    train_data_manifest_sha256: Optional[str] = field(
        default=None,
        metadata={"help": "SHA-256 (hex) of the manifest.json of the data directory; set "
                          "from the data at every start (a resumed run records the data it "
                          "resumed on) and recorded in checkpoints; empty for data without a "
                          "manifest (e.g. data binarized by fairseq-preprocess directly)"},
    )
    train_data_experiment: Optional[str] = field(
        default=None,
        metadata={"help": "experiment named by the data's manifest.json; set from the data "
                          "and recorded in checkpoints (empty without a manifest)"},
    )
    train_data_level: Optional[str] = field(
        default=None,
        metadata={"help": "level named by the data's manifest.json; set from the data and "
                          "recorded in checkpoints (empty without a manifest)"},
    )
    train_data_seed: Optional[int] = field(
        default=None,
        metadata={"help": "data seed named by the data's manifest.json; set from the data and "
                          "recorded in checkpoints (unset without a manifest)"},
    )
    train_args_sha256: Optional[str] = field(
        default=None,
        metadata={"help": "SHA-256 of the preset's fairseq-train arguments with the schedule "
                          "applied (experiments.presets.train_args_sha256); fairseq-entropy run "
                          "sets it, recorded in checkpoints; unset for other runs"},
    )
    train_extra_args_sha256: Optional[str] = field(
        default=None,
        metadata={"help": "SHA-256 of the fairseq-train arguments given after the preset's "
                          "(after -- on fairseq-entropy run's command line; the hash of no "
                          "arguments when there are none); fairseq-entropy run sets it, recorded "
                          "in checkpoints, and runs with other extra arguments are never seeds "
                          "of one cell; unset for other runs"},
    )
    # the training schedule, read for the progress line (fairseq's own options; no help text
    # so that fairseq does not add them to the command line a second time)
    max_update: int = II("optimization.max_update")
    max_epoch: int = II("optimization.max_epoch")
    batch_size: Optional[int] = II("dataset.batch_size")
    max_tokens: Optional[int] = II("dataset.max_tokens")


@register_task("systematicity", dataclass=SystematicityConfig)
class SystematicityTask(TranslationTask):
    """Translation task for systematic-generalization data (see module docstring)."""

    cfg: SystematicityConfig

    @classmethod
    def setup_task(cls, cfg: SystematicityConfig, **kwargs):
        install_cpu_seeding()
        task = super().setup_task(cfg, **kwargs)
        task.read_manifest(cfg)
        return task

    def read_manifest(self, cfg) -> None:
        """Log the training set's entropies from the data's ``manifest.json`` and record the
        dictionaries and the data in the task config (:meth:`record_dictionaries`,
        :meth:`record_data`); called once by :meth:`setup_task`."""
        task = self
        first = utils.split_paths(cfg.data)[0]
        manifest = os.path.join(first, "manifest.json")
        if os.path.exists(manifest):
            with open(manifest, "rb") as f:
                raw = f.read()
            info = json.loads(raw)
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
        task.record_data(cfg, raw if task.manifest is not None else None)
        task.data_dir = first
        task.progress = None
        task.valid_counts = [0, 0]

    @classmethod
    def load_dictionary(cls, filename):
        """The dictionary in ``filename`` (fairseq's ``dict.txt`` format) as a
        :class:`SymbolDictionary`."""
        return SymbolDictionary.load(filename)

    def record_dictionaries(self, cfg) -> None:
        """Set ``dictionary_grammar`` and ``dictionary_hash`` in the task config
        (:meth:`_record`)."""
        self._record(cfg, {"dictionary_grammar": dictionary_grammar(self.tgt_dict),
                           "dictionary_hash": dictionary_hash(self.src_dict, self.tgt_dict)})

    def record_data(self, cfg, manifest_bytes: Optional[bytes]) -> None:
        """Set ``train_data_manifest_sha256`` (SHA-256 of ``manifest_bytes``, the data's
        ``manifest.json``; ``""`` without one) and the experiment, level and data seed the
        manifest names in the task config (:meth:`_record`)."""
        info = self.manifest or {}
        seed = info.get("seed")
        self._record(cfg, {
            "train_data_manifest_sha256":
                "" if manifest_bytes is None else manifest_sha256(manifest_bytes),
            "train_data_experiment": str(info.get("experiment") or ""),
            "train_data_level": str(info.get("level") or ""),
            "train_data_seed": seed if isinstance(seed, int) else None})

    def _record(self, cfg, values: dict) -> None:
        """Set ``values`` in the task config.

        fairseq's ``tasks.setup_task`` hands the task a merged copy of ``cfg.task`` whose
        parent is the root config that the trainer saves in checkpoints; the values are set in
        both, so that every checkpoint's ``cfg.task`` records them.
        """
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

    def training_record(self) -> dict:
        """What a checkpoint records about its training: the data (manifest SHA-256,
        experiment, level, data seed), the arguments' hash, ``max_update``, ``max_epoch`` and
        the updates done so far (None before the first update of this process)."""
        def option(name):
            try:
                return getattr(self.cfg, name)
            except Exception:  # an interpolation that only fairseq-train resolves
                return None

        return {"data_manifest_sha256": self.cfg.train_data_manifest_sha256,
                "experiment": self.cfg.train_data_experiment,
                "level": self.cfg.train_data_level, "data_seed": self.cfg.train_data_seed,
                "train_args_sha256": self.cfg.train_args_sha256,
                "extra_args_sha256": self.cfg.train_extra_args_sha256,
                "max_update": option("max_update"), "max_epoch": option("max_epoch"),
                "updates": getattr(self, "_last_update", None)}

    def state_dict(self):
        """fairseq's task state plus :meth:`dictionary_record` under ``dictionaries`` and
        :meth:`training_record` under ``training``."""
        return {**super().state_dict(), "dictionaries": self.dictionary_record(),
                "training": self.training_record()}

    def load_state_dict(self, state_dict):
        """Check a checkpoint's dictionaries against the data's, then load the task state.

        fairseq calls this with the checkpoint's task state before it builds the model and
        loads the weights (``checkpoint_utils.load_model_ensemble_and_task``).

        Raises:
            DictionaryMismatchError: the checkpoint was trained with other dictionaries
                (:func:`~fairseq_entropy.data.dictionary.check_dictionaries`); the message gives
                both grammars, hashes and sizes and the fix.
        """
        state_dict = dict(state_dict)
        theirs = state_dict.pop("dictionaries", None)
        if theirs is not None:
            check_dictionaries(theirs, self.dictionary_record(), self.data_dir)
        training = state_dict.pop("training", None)
        if training is not None:
            # one parseable line: fairseq-generate's log keeps the record beside the decode
            logger.info("checkpoint record: %s", json.dumps({"training": training}))
        super().load_state_dict(state_dict)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        self.order_training_set(split)

    def order_training_set(self, split: str) -> None:
        """Wrap the training split ``split`` (any other split is left alone) for random
        batches (``--random-batches``, ``--batch-pool``) or epoch-1 batches on resume."""
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

    def _int_option(self, name: str) -> int:
        """The int option ``name`` of the task's config, or 0 when unset or not resolvable
        (outside fairseq-train, the interpolated optimization options are not)."""
        try:
            value = getattr(self.cfg, name)
        except Exception:
            return 0
        return value if isinstance(value, int) else 0

    def _new_progress(self) -> TrainingProgress:
        return TrainingProgress(self.cfg.progress_interval, self._int_option("max_update"),
                                self._int_option("max_epoch"), self.updates_per_epoch_estimate())

    def updates_per_epoch_estimate(self) -> Optional[int]:
        """Training batches an epoch, ``ceil(training sentences / --batch-size)``, for the
        progress line until the first epoch has ended; None without a loaded training split,
        a ``--batch-size`` or with ``--max-tokens`` (batches of varying size)."""
        train = self.datasets.get(self.cfg.train_subset)
        batch = self._int_option("batch_size")
        if train is None or not batch or self._int_option("max_tokens"):
            return None
        return math.ceil(len(train) / batch)

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """fairseq's training step (with ``--length-chunks K``, over the K length-sorted parts
        of the batch, see :func:`split_by_length`), then the progress line when one is due."""
        if self.cfg.length_chunks > 1 and sample["target"].size(0) > 1:
            out = self._chunked_train_step(sample, model, criterion, optimizer, update_num,
                                           ignore_grad)
        else:
            out = super().train_step(sample, model, criterion, optimizer, update_num,
                                     ignore_grad)
        self._count_update(update_num)
        return out

    def _count_update(self, update_num: int) -> None:
        """Record that update ``update_num`` (0-based) is done once this step ends, and log the
        progress line when one is due (with the last validation's seq_acc)."""
        if self.progress is None:
            self.progress = self._new_progress()
        self._last_update = update_num + 1  # updates completed once this step is done
        correct, total = self.valid_counts
        if total:
            self.progress.seq_acc = correct / total
        line = self.progress.step(update_num)
        if line:
            logger.info(line)

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
