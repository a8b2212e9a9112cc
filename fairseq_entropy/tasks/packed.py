"""The ``packed_systematicity`` task: K independent training runs in one ``fairseq-train``.

The runs share the preset (architecture, criterion, optimizer, schedule: every option of the
command line) and differ in their data (``data``: any level or data seed of one fixed
dictionary) and training seed (``seed``), listed in ``pack.json`` in the directory given as
fairseq-train's data argument (:mod:`fairseq_entropy.tasks.packed_runs`).  Each run is the run
``fairseq-train DATA --seed SEED`` alone would be:

* its model is built under ``torch.manual_seed(SEED)`` and ``np.random.seed(SEED)``, as
  fairseq-train seeds before building the model;
* its batches are those of its own ``systematicity`` task and iterator with seed SEED (same
  batches, same order every epoch), step j of the pack holding step j of every run
  (:mod:`fairseq_entropy.data.packed_dataset`);
* its loss is normalised by its own sample size (:mod:`fairseq_entropy.criterions.packed`);
* its gradient is clipped to ``--clip-norm`` on its own (fairseq's clipping of all the pack's
  gradients together is switched off);
* its optimizer state is its own slice of the stacked state (Adam and AdamW are
  element-wise), under the preset's learning-rate schedule;
* its dropout masks are its own draws (``vmap(..., randomness="different")``);
* its validation metrics are logged as ``loss_k`` and ``seq_acc_k`` (``seq_acc`` and ``loss``
  pool the runs) and its best checkpoint is kept on its own metric.

Runs may differ in the size of their training sets when the learning rate follows from the
update count and ``--max-update`` alone, not the epoch
(:data:`~.packed_own_length.EPOCH_FREE_SCHEDULERS`, one ``--lr``, no ``--force-anneal`` or
``--max-epoch``), and then also in their number of updates (pack.json's ``max_update`` of a
run; Experiment 2's support sizes) when it does not depend on ``--max-update`` either
(:data:`~.packed_own_length.UPDATE_COUNT_SCHEDULERS`).  Step g of the pack is then step g of
every run that has not reached its own ``max_update``
(:class:`~fairseq_entropy.data.packed_dataset.RaggedSchedule`); a run that has is left
unchanged by the optimizer from then on; each run is validated, and its best checkpoint kept,
at the ends of its own epochs (``--validate-interval`` epochs, every
``--validate-interval-updates``, and at its last update), as fairseq-train validates it alone.

A pack's parameters are stacked (:mod:`fairseq_entropy.models.packed`), so its checkpoints are
packed too; they also hold every run's ordinary weights, from which ``fairseq-entropy unpack``
(and, unless ``--no-unpack-at-exit``, the end of fairseq-train) writes each run's ordinary
``checkpoint_last.pt`` and ``checkpoint_best.pt`` (:func:`~.packed_runs.unpack`).  A killed
pack resumes from its packed ``checkpoint_last.pt`` as a single run does.
"""

import atexit
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from fairseq.tasks import register_task

from ..criterions.packed import PackedCriterion, run_keys
from ..data import exact_match
from ..data.packed_dataset import (PackedDataset, PackedEpochBatchIterator,
                                   packed_batch_sampler, run_batches)
from ..models.packed import PackedError, PackedModel
from .packed_own_length import (EPOCH_FREE_SCHEDULERS, OwnLengthRuns, check_schedule,
                                fairseq_validates, run_limits)
from .packed_runs import read_pack, unpack
from .seeding import install_cpu_seeding
from .systematicity import SystematicityConfig, SystematicityTask

logger = logging.getLogger(__name__)
_UNPACK_AT_EXIT = set()


@dataclass
class PackedSystematicityConfig(SystematicityConfig):
    """Options of ``packed_systematicity``: the ``systematicity`` options plus these."""

    run_clip_norm: float = field(default=-1.0, metadata={
        "help": "clip each run's gradient norm to this (each run on its own); -1 takes "
                "--clip-norm, which then no longer clips the pack's gradients together"})
    no_unpack_at_exit: bool = field(default=False, metadata={
        "help": "do not write the runs' ordinary checkpoints when fairseq-train exits "
                "(fairseq-entropy unpack writes them on request)"})


def _seq_correct(task, generator, model, sample) -> int:
    """Sentences of ``sample`` whose greedy decoding by ``model`` is exactly the target."""
    hyps = task.inference_step(generator, [model], sample, prefix_tokens=None)
    pad, eos = task.tgt_dict.pad(), task.tgt_dict.eos()
    return sum(exact_match(hyps[i][0]["tokens"].cpu(), sample["target"][i].cpu(), pad, eos)
               for i in range(len(hyps)))


@register_task("packed_systematicity", dataclass=PackedSystematicityConfig)
class PackedSystematicityTask(OwnLengthRuns, SystematicityTask):
    """K ``systematicity`` runs trained side by side (see the module docstring).

    Attributes:
        runs: the pack's runs (:func:`~.packed_runs.read_pack`).
        children: one ordinary ``systematicity`` task per run (its data, batches, records).
    """

    cfg: PackedSystematicityConfig

    @classmethod
    def setup_task(cls, cfg: PackedSystematicityConfig, **kwargs):
        install_cpu_seeding()
        runs = read_pack(cfg.data)
        children = []
        for run in runs:
            child_cfg = _child_cfg(cfg, run["data"], run)
            children.append(SystematicityTask.setup_task(child_cfg, **kwargs))
        hashes = {c.cfg.dictionary_hash for c in children}
        if len(hashes) > 1:
            raise PackedError(
                f"packed runs: the runs' data use {len(hashes)} different dictionaries "
                f"({sorted(hashes)}); a pack shares one. Fix: pack runs of one grammar")
        first = children[0]
        task = cls(cfg, first.src_dict, first.tgt_dict)
        task.runs, task.children = runs, children
        task.manifest = None
        task.record_dictionaries(cfg)
        task.record_data(cfg, None)
        task.data_dir = cfg.data
        task.progress = None
        task.valid_counts = [0, 0]
        task.best = [None] * len(runs)
        task.model = None
        task.criterion = None
        root = cfg._get_parent()
        _refuse_pooled_options(root)
        task.limits = run_limits(runs, root)
        task.schedule = None
        task.latest_valid = {}
        task._train_itr = None  # the training iterator (its epoch and position)
        task._valid_subsets_seen = 0
        clip = cfg.run_clip_norm
        if root is not None and "optimization" in root:
            if clip < 0:
                clip = float(root.optimization.clip_norm)
            root.optimization.clip_norm = 0.0  # no clipping of all runs' gradients together
        task.clip_norm = max(float(clip), 0.0)
        task.save_dir = root.checkpoint.save_dir if root is not None and "checkpoint" in root \
            else None
        return task

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        for child in self.children:
            child.load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        self.datasets[split] = PackedDataset([c.datasets[split] for c in self.children])

    def updates_per_epoch_estimate(self) -> Optional[int]:
        """Steps of a packed epoch: step j is every run's batch j, so the runs' own epoch
        length (the longest, where they differ), not the batches of all runs together."""
        counts = [child.updates_per_epoch_estimate() for child in self.children]
        return None if None in counts or not counts else max(counts)

    def get_batch_iterator(self, dataset, *args, seed=1, epoch=1, num_shards=1, shard_id=0,
                           num_workers=0, data_buffer_size=0, skip_remainder_batch=False,
                           grouped_shuffling=False, **kwargs):
        """One iterator whose step j is step j of every run's own iterator (seeded with the
        run's seed), or, for runs of their own length, whose step g of the whole training is
        every unfinished run's step g
        (:class:`~fairseq_entropy.data.packed_dataset.RaggedSchedule`); fairseq's iterator
        state (epoch, position) resumes it."""
        if not isinstance(dataset, PackedDataset):
            return super().get_batch_iterator(dataset, *args, seed=seed, epoch=epoch, **kwargs)
        kwargs.pop("disable_iterator_cache", None)
        runs = [child.get_batch_iterator(ds, *args, seed=run["seed"], epoch=epoch,
                                         skip_remainder_batch=skip_remainder_batch,
                                         disable_iterator_cache=True, **kwargs)
                for child, ds, run in zip(self.children, dataset.datasets, self.runs)]
        train = dataset is self.datasets.get(self.cfg.train_subset)
        if train and self.limits is None:
            counts = [len(run_batches(itr, 1, True)) for itr in runs]
            if len(set(counts)) > 1:  # epochs of their own length: each run its own steps
                root = self.cfg._get_parent()
                check_schedule(root, f"the runs have {counts} training batches per epoch",
                               EPOCH_FREE_SCHEDULERS,
                               "pack runs whose training sets have the same size")
                self.limits = [int(root.optimization.max_update)] * len(runs)
        sampler = packed_batch_sampler(dataset, runs, shuffle=train, same_length=train,
                                       limits=self.limits if train else None)
        itr = PackedEpochBatchIterator(
            dataset=dataset, collate_fn=dataset.collater, batch_sampler=sampler, seed=seed,
            num_shards=num_shards, shard_id=shard_id, num_workers=num_workers, epoch=epoch,
            buffer_size=data_buffer_size, grouped_shuffling=grouped_shuffling)
        if train:
            self.schedule = sampler if self.limits is not None else None
            self._train_itr = itr
        return itr

    def build_model(self, cfg, from_checkpoint=False):
        """The K runs' models, each built under its run's seed as fairseq-train seeds before
        building (torch and numpy), packed in a :class:`PackedModel`; the random states are
        restored afterwards."""
        torch_state, np_state = torch.get_rng_state(), np.random.get_state()
        models = []
        for child, run in zip(self.children, self.runs):
            torch.manual_seed(run["seed"])
            np.random.seed(run["seed"])
            models.append(child.build_model(cfg, from_checkpoint))
        torch.set_rng_state(torch_state)
        np.random.set_state(np_state)
        self.model = PackedModel(models)
        if self.save_dir and not self.cfg.no_unpack_at_exit and \
                self.save_dir not in _UNPACK_AT_EXIT:
            _UNPACK_AT_EXIT.add(self.save_dir)
            atexit.register(_unpack_at_exit, os.path.join(self.save_dir, "checkpoint_last.pt"))
        return self.model

    def build_criterion(self, cfg, from_checkpoint=False):
        self.criterion = PackedCriterion(self, super().build_criterion(cfg, from_checkpoint))
        return self.criterion

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """Every run's step: the packed loss, one backward (each run's own gradient)."""
        model.train()
        model.set_num_updates(update_num)
        loss, sample_size, logging_output = criterion(model, sample)
        if ignore_grad:
            loss = loss * 0
        optimizer.backward(loss)
        self._count_update(update_num)
        for k, child in enumerate(self.children):
            child._last_update = self._own_updates(k, self._last_update)
        return loss, sample_size, logging_output

    def optimizer_step(self, optimizer, model, update_num):
        """Clip each run's gradient norm to the clip norm on its own (fairseq's
        ``clip_grad_norm_``: scale by min(1, max_norm / (norm + 1e-6))), then step.  A run
        that has reached its own ``max_update`` keeps its weights (the optimizer's step is
        undone on its slice); a run whose own epoch ends with this update is then validated
        (:meth:`_validate_run`)."""
        params = list(model.parameters())
        done = [] if self.limits is None else \
            [k for k, limit in enumerate(self.limits) if update_num >= limit]
        kept = [p.data[done].clone() for p in params] if done else None
        if self.clip_norm > 0:
            clip_runs(params, self.clip_norm)
        super().optimizer_step(optimizer, model, update_num)
        if kept is not None:
            with torch.no_grad():
                for p, value in zip(params, kept):
                    p.data[done] = value
        if self.limits is not None:
            for k, save in self._runs_validating(update_num + 1):
                self._validate_run(k, model, update_num + 1, save)

    def begin_valid_epoch(self, epoch, model):
        """Load every run's current weights into its ordinary model (fairseq hook, once
        before all ``--valid-subset`` subsets)."""
        super().begin_valid_epoch(epoch, model)
        self._valid_subsets_seen = 0
        states = model.unpacked_state_dicts()
        for k, m in enumerate(model.models):
            m.load_state_dict(states[k], strict=True)

    def valid_step(self, sample, model, criterion):
        """Each run's ordinary validation (its criterion, and greedy exact match with
        ``--eval-seq-acc``) on its own batch, with its ordinary model.  A pack whose runs
        have their own ``max_update`` validates each run at its own epoch ends instead
        (:meth:`_validate_run`): fairseq-train's validation of the pack computes only the
        runs not validated yet and reports the others' latest validation
        (:meth:`reduce_metrics`)."""
        if self.limits is not None:
            # runs not validated yet (a pack cut off before their first epoch ended) are
            # computed here, the others are reported from their latest validation
            sample = {"runs": [None if k in self.latest_valid else s
                               for k, s in enumerate(sample["runs"])]}
        return self._valid_runs(sample, model, criterion)

    def _valid_runs(self, sample, model, criterion):
        """:meth:`valid_step` of the runs with a batch in ``sample``."""
        out = {"ntokens": 0, "nsentences": 0, "sample_size": 1}
        total = 0.0
        for k, s in enumerate(sample["runs"]):
            if s is None:
                continue
            m = model.models[k].eval()
            with torch.no_grad():
                loss, size, log = criterion.inner(m, s)
            total += float(loss) / max(size, 1)
            out[f"_loss_{k}"] = float(loss)
            out[f"_ss_{k}"] = size
            out["ntokens"] += log.get("ntokens", 0)
            out["nsentences"] += log.get("nsentences", 0)
            if self.cfg.eval_seq_acc:
                child = self.children[k]
                correct = _seq_correct(self, child.sequence_generator, m, s)
                out[f"_seq_acc_correct_{k}"] = correct
                out[f"_seq_acc_total_{k}"] = s["target"].size(0)
        return torch.tensor(total), 1, out

    def reduce_metrics(self, logging_outputs, criterion, latest: bool = True):
        """The packed criterion's metrics and, per run k, ``seq_acc_k``; ``seq_acc`` is the
        runs' pooled exact match (all runs' correct sentences over all their sentences)."""
        from fairseq.logging import metrics

        if self.limits is not None and latest:
            # fairseq-train's validation of a pack whose runs validate at their own epoch
            # ends: each run's latest validation, beside the runs computed in this one
            present = set(run_keys(logging_outputs))
            logging_outputs = list(logging_outputs) + [
                log for k in sorted(self.latest_valid) if k not in present
                for log in self.latest_valid[k]]
        criterion.__class__.reduce_metrics(logging_outputs)
        all_correct = all_total = 0
        for k in run_keys(logging_outputs):
            correct = sum(log.get(f"_seq_acc_correct_{k}", 0) for log in logging_outputs)
            total = sum(log.get(f"_seq_acc_total_{k}", 0) for log in logging_outputs)
            if total:
                metrics.log_scalar(f"seq_acc_{k}", correct / total, total, round=4)
                all_correct += correct
                all_total += total
        if all_total:
            metrics.log_scalar("seq_acc", all_correct / all_total, all_total, round=4)
            self.valid_counts[0] += all_correct
            self.valid_counts[1] += all_total

    def post_validate(self, model, stats, agg):
        """Keep each run's best weights on its own ``--best-checkpoint-metric``
        (``<metric>_k``) where fairseq-train decides checkpoint_best: at a validation of the
        first ``--valid-subset`` after which it saves a checkpoint (fairseq hook, called once
        a subset; :func:`fairseq_validates` at the training iterator's epoch and position).
        A pack whose runs have their own ``max_update`` keeps them at the runs' own
        validations instead (:meth:`_validate_run`)."""
        first = self._valid_subsets_seen == 0
        self._valid_subsets_seen += 1
        itr = self._train_itr
        if self.limits is not None or not first or itr is None:
            return
        root = self.cfg._get_parent()
        updates = int(stats.get("num_updates") or 0)
        if root is not None and not fairseq_validates(
                root, updates, end=itr.end_of_epoch(), epoch=itr.epoch,
                max_update=int(root.optimization.max_update or 0))[1]:
            return
        metric = root.checkpoint.best_checkpoint_metric if root is not None else "loss"
        for k in range(len(self.children)):
            value = stats.get(f"{metric}_{k}")
            if value is not None:
                self._keep_best(k, value, model, updates, itr.state_dict())

    def _keep_best(self, k: int, value: float, model, updates: int, iterator: dict) -> None:
        """Make run k's current weights its best when ``value`` is at least as good as its
        best so far (a tie goes to the newer weights, as fairseq's checkpoint_best.pt does)."""
        root = self.cfg._get_parent()
        maximize = bool(root.checkpoint.maximize_best_checkpoint_metric) if root else False
        best = self.best[k]
        if best is None or (value >= best["value"] if maximize else value <= best["value"]):
            self.best[k] = {"value": float(value),
                            "model": {n: t.detach().clone() for n, t in
                                      model.models[k].state_dict().items()},
                            "task_state": self.children[k].state_dict(),
                            "updates": updates, "train_iterator": iterator}

    def _last_update_or_0(self) -> int:
        return int(getattr(self, "_last_update", None) or 0)

    def state_dict(self):
        """The pack's task state plus ``packed``: per run its description, ordinary weights,
        task config values, task state, clip norm and best weights."""
        state = super().state_dict()
        if self.model is None:
            return state
        weights = self.model.unpacked_state_dicts()
        runs = []
        for k, (run, child) in enumerate(zip(self.runs, self.children)):
            record = {"run": run, "model": weights[k], "task_state": child.state_dict(),
                      "clip_norm": self.clip_norm, "best": self.best[k],
                      "task_cfg": {key: child.cfg[key] for key in (
                          "train_data_manifest_sha256", "train_data_experiment",
                          "train_data_level", "train_data_seed", "dictionary_grammar",
                          "dictionary_hash")}}
            if self.limits is not None:
                record["own"] = self._own_record(k)
            runs.append(record)
        state["packed"] = {"runs": runs}
        return state

    def load_state_dict(self, state_dict):
        """The pack's task state; restores every run's best so far."""
        state_dict = dict(state_dict)
        packed = state_dict.pop("packed", None)
        if packed is not None:
            if [r["run"]["data"] for r in packed["runs"]] != [r["data"] for r in self.runs]:
                raise PackedError("packed runs: the checkpoint's runs differ from pack.json's. "
                                  "Fix: resume with the pack.json it was trained with")
            self.best = [r.get("best") for r in packed["runs"]]
        super().load_state_dict(state_dict)


def _refuse_pooled_options(root) -> None:
    """Refuse the fairseq-train options that would act on all runs of a pack at once:
    ``--patience`` (early stopping on the runs' pooled validation) and ``--fp16``/``--amp``
    (one loss scale: an overflow in one run would skip every run's update).

    Raises:
        PackedError: naming the option and the fix.
    """
    if root is None or "checkpoint" not in root:
        return
    if root.checkpoint.patience > 0:
        raise PackedError(
            f"packed runs: --patience {root.checkpoint.patience} would stop every run on "
            f"the runs' pooled validation. Fix: train the pack without --patience")
    if root.common.fp16 or root.common.amp:
        raise PackedError(
            "packed runs: --fp16 and --amp keep one loss scale for all runs, so an overflow "
            "in one run would skip every run's update. Fix: train the pack in fp32 (or "
            "--bf16, which has no loss scale, for runs of one length)")


def clip_runs(params, max_norm: float) -> torch.Tensor:
    """Scale each run's slice ``p.grad[k]`` of the stacked parameters so that the run's
    gradient norm (over all its parameters) is at most ``max_norm``: fairseq's
    ``clip_grad_norm_`` per run.  Every packed implementation stacks its parameters with the
    run first (``[K, ...]``).  Returns the K norms before clipping (float32 ``[K]``)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(0)
    k = grads[0].size(0)
    sq = torch.stack([g.detach().reshape(k, -1).float().pow(2).sum(dim=1) for g in grads])
    norms = sq.sum(dim=0).sqrt()
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.to(g.dtype).view(k, *([1] * (g.dim() - 1))))
    return norms


def _child_cfg(cfg, data: str, run: Optional[dict] = None):
    """A copy of the pack's task config for one run (its data, and the ``max_update`` and
    ``train_args_sha256`` that ``run`` gives of its own), the packed options dropped; its
    parent stays the pack's root config."""
    import copy

    from omegaconf import open_dict

    child = copy.deepcopy(cfg)
    with open_dict(child):
        child.data = data
        child._name = "systematicity"
        if run is not None and run.get("max_update"):
            child.max_update = int(run["max_update"])
        if run is not None and run.get("train_args_sha256"):
            child.train_args_sha256 = run["train_args_sha256"]
        for key in ("run_clip_norm", "no_unpack_at_exit"):
            child.pop(key, None)
    return child


def _unpack_at_exit(checkpoint: str) -> None:
    """Write the runs' ordinary checkpoints from the pack's last checkpoint, if there is one."""
    if os.path.exists(checkpoint):
        for path in unpack(checkpoint):
            logger.info("unpacked %s", path)
