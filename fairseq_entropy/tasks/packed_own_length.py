"""Runs of their own length in a pack: which learning-rate schedules runs with training sets
of different sizes, or with their own ``--max-update``, can share (:func:`own_max_update` on
fairseq-train arguments, :func:`check_schedule` and :func:`run_limits` on the pack's config),
and the packed task's part that follows each such run's own epochs (:class:`OwnLengthRuns`:
its updates, its validations where fairseq-train alone would validate, its checkpoint record).
"""

import logging
from typing import List, Optional, Sequence

from ..errors import PackedError

logger = logging.getLogger(__name__)

#: fairseq learning-rate schedulers whose rate follows from the update count (and
#: ``--max-update``) alone, never from the epoch: runs whose epochs differ in length can share
#: them in a pack
EPOCH_FREE_SCHEDULERS = ("fixed", "inverse_sqrt", "cosine", "polynomial_decay", "tri_stage")
#: ... and of these, the ones whose rate does not depend on ``--max-update`` either: runs of
#: their own number of updates can share them
UPDATE_COUNT_SCHEDULERS = ("fixed", "inverse_sqrt")


def own_max_update(args: Sequence[str]) -> bool:
    """Whether runs with these fairseq-train arguments can each train their own
    ``--max-update`` in one pack: the learning rate follows from the update count alone
    (``--lr-scheduler`` fixed, fairseq's default, or inverse_sqrt:
    :data:`UPDATE_COUNT_SCHEDULERS`), with one ``--lr`` and no ``--force-anneal``, and no
    ``--max-epoch`` ends the training."""
    def value(option, default=None):
        return args[args.index(option) + 1] if option in args[:-1] else default

    lr = value("--lr", "")
    return value("--lr-scheduler", "fixed") in UPDATE_COUNT_SCHEDULERS and \
        "--force-anneal" not in args and "--max-epoch" not in args and "," not in lr and \
        ":" not in lr


def without_max_update(args: Sequence[str]) -> List[str]:
    """``args`` with the value of ``--max-update`` replaced by ``own``."""
    out = list(args)
    if "--max-update" in out[:-1]:
        out[out.index("--max-update") + 1] = "own"
    return out


def run_limits(runs, root) -> Optional[list]:
    """Every run's own number of updates (pack.json's ``max_update``, else the pack's
    ``--max-update``), or None when they are all the pack's.

    A pack's ``--max-update`` below a run's cuts that run short, as a cut-off training is
    (a later fairseq-train with the largest resumes it).

    Raises:
        PackedError: the pack's ``--max-update`` above every run's, or a learning rate that
            depends on more than the update count (:func:`check_schedule`).
    """
    pack = int(root.optimization.max_update) if root is not None and \
        "optimization" in root else 0
    limits = [int(r.get("max_update") or pack) for r in runs]
    if all(u == pack for u in limits):
        return None
    if not pack or max(limits) < pack:
        raise PackedError(f"packed runs: the runs' max_update are {limits} and the pack's "
                          f"--max-update is {pack}, so its last steps would train no run. "
                          f"Fix: pass --max-update {max(limits)}, the largest")
    check_schedule(root, f"the runs have their own max_update ({limits})",
                   UPDATE_COUNT_SCHEDULERS, "pack runs of one max_update")
    return limits


def check_schedule(root, why: str, allowed, fix: str) -> None:
    """Refuse a training under which runs that differ as ``why`` says would not each follow
    their own schedule: a learning-rate scheduler not in ``allowed``, several ``--lr``
    values, ``--force-anneal`` (the fixed scheduler's rate would change with the pack's
    epoch), ``--max-epoch``, no ``--max-update``, ``--update-freq`` above 1 (a run's steps
    are batches) and ``--bf16`` (a finished run's frozen weights would come back from the
    optimizer's fp32 copy). (``--patience``, ``--fp16`` and ``--amp`` are refused for every
    pack before this is called.)

    Raises:
        PackedError: naming what is refused, ``why`` and the fix.
    """
    opt, sched, common = root.optimization, root.lr_scheduler, root.common
    name = getattr(sched, "_name", None)
    if name not in allowed or len(list(opt.lr)) != 1 or \
            getattr(sched, "force_anneal", None) is not None or opt.max_epoch:
        raise PackedError(
            f"packed runs: {why}, so the learning rate must follow from the update count "
            f"alone ({', '.join('--lr-scheduler ' + a for a in allowed)}, one --lr, no "
            f"--force-anneal or --max-epoch), but the pack trains with --lr-scheduler "
            f"{name}, --lr {list(opt.lr)}, --force-anneal "
            f"{getattr(sched, 'force_anneal', None)}, --max-epoch {opt.max_epoch}. Fix: {fix}")
    refused = [text for bad, text in (
        (not opt.max_update, "no --max-update (the runs' steps are counted to it)"),
        (list(opt.update_freq) != [1], f"--update-freq {list(opt.update_freq)} (a run's "
                                       "steps are its batches)"),
        (common.bf16, "--bf16 (a finished run's weights would come back from the "
                      "optimizer's fp32 copy)"))
        if bad]
    if refused:
        raise PackedError(f"packed runs: {why}, and the pack trains with {refused[0]}. Fix: "
                          f"{fix}, or train without it")


def fairseq_validates(root, updates: int, *, end: bool, epoch: int, max_update: int):
    """``(validate, save)``: whether fairseq-train, after update ``updates``, validates, and
    whether it saves a checkpoint with that validation's value there, so decides its
    checkpoint_best (``fairseq_cli.train.validate_and_save`` and
    ``checkpoint_utils.save_checkpoint``).

    It validates at the end (``end``) of every ``--validate-interval``-th epoch, at the last
    update, at a mid-epoch save (``--save-interval-updates``) and every
    ``--validate-interval-updates``, never with ``--disable-validation`` or before
    ``--validate-after-updates``. It saves at the end of every ``--save-interval``-th epoch,
    at the last update and every ``--save-interval-updates``, never with ``--no-save``.
    ``--patience`` and ``--stop-time-hours`` are not followed (packs refuse the first).

    Args:
        root: fairseq-train's config (``dataset``, ``checkpoint``).
        updates: updates done, counted from 1.
        end: whether update ``updates`` ends an epoch.
        epoch: that epoch (1-based; read only when ``end``).
        max_update: the training's last update (0: none).
    """
    ds, ck = root.dataset, root.checkpoint
    if ds.disable_validation or updates < ds.validate_after_updates:
        return False, False
    last = bool(max_update) and updates >= max_update
    save_mid = ck.save_interval_updates > 0 and updates % ck.save_interval_updates == 0
    save = (end and epoch % ck.save_interval == 0) or last or save_mid
    validate = (not end and save) or (end and epoch % ds.validate_interval == 0) or last or \
        (ds.validate_interval_updates > 0 and updates % ds.validate_interval_updates == 0)
    return validate, save and not ck.no_save


class OwnLengthRuns:
    """The packed task's methods for runs of their own length (mixed into
    ``PackedSystematicityTask``; they read its ``limits``, ``schedule``, ``children``,
    ``runs``, ``criterion`` and ``latest_valid``)."""

    def _own_updates(self, k: int, updates):
        """Run k's updates when the pack has made ``updates`` (its ``max_update`` at most)."""
        if self.limits is None or updates is None:
            return updates
        return min(int(updates), self.limits[k])

    def _runs_validating(self, updates: int) -> list:
        """``[(k, save)]``: the runs that fairseq-train would validate alone after their
        update ``updates``, and whether it would also save a checkpoint there
        (:func:`fairseq_validates`, each run at its own epoch's position and its own
        ``max_update``)."""
        root = self.cfg._get_parent()
        if root is None or self.schedule is None:
            return []
        out = []
        for k, limit in enumerate(self.limits):
            if updates > limit:
                continue
            epoch, j = self.schedule.run_position(k, updates - 1)
            validate, save = fairseq_validates(
                root, updates, end=j + 1 == self.schedule.epoch_steps[k], epoch=epoch,
                max_update=limit)
            if validate:
                out.append((k, save))
        return out

    def _iterator_at(self, k: int, updates: int) -> dict:
        """fairseq's training-iterator state of run k alone after ``updates`` of its updates
        (``EpochBatchIterator.state_dict``: at an epoch's end, the next epoch at 0)."""
        epoch, done = divmod(updates, self.schedule.epoch_steps[k])
        return {"version": 2, "epoch": epoch + 1, "iterations_in_epoch": done, "shuffle": True}

    def _validate_run(self, k: int, model, updates: int, save: bool = True) -> None:
        """Validate run k alone on the first ``--valid-subset`` (its ordinary model, its own
        batches as fairseq-train's validation iterator makes them), log the line fairseq-train
        would and, where fairseq-train would save a checkpoint (``save``), keep its best
        weights (:meth:`_keep_best`)."""
        from fairseq import utils

        root = self.cfg._get_parent()
        ds = root.dataset
        subset = ds.valid_subset.split(",")[0]
        child = self.children[k]
        if subset not in child.datasets:
            child.load_dataset(subset, combine=False, epoch=1)
        ordinary = model.synced(k)
        device = next(model.parameters()).device
        itr = child.get_batch_iterator(
            dataset=child.dataset(subset), max_tokens=ds.max_tokens_valid,
            max_sentences=ds.batch_size_valid,
            max_positions=utils.resolve_max_positions(child.max_positions(),
                                                      ordinary.max_positions()),
            ignore_invalid_inputs=ds.skip_invalid_size_inputs_valid_test,
            required_batch_size_multiple=ds.required_batch_size_multiple,
            seed=root.common.seed, num_shards=1, shard_id=0, num_workers=0, epoch=1,
            data_buffer_size=ds.data_buffer_size, disable_iterator_cache=True,
            skip_remainder_batch=False).next_epoch_itr(shuffle=False)
        logs = []
        for batch in itr:
            batch = utils.apply_to_sample(lambda t: t.to(device), batch)
            runs = [None] * len(self.children)
            runs[k] = batch
            logs.append(self._valid_runs({"runs": runs}, model, self.criterion)[2])
        self.latest_valid[k] = logs
        self.valid_counts = [0, 0]  # the progress line's "last valid seq_acc": this one
        stats = self._reduced(logs)
        epoch, _ = self.schedule.run_position(k, updates - 1)
        logger.info("run %d (%s): valid on '%s' subset | epoch %03d | loss %s | seq_acc %s | "
                    "num_updates %d", k, self.runs[k]["name"], subset, epoch,
                    stats.get(f"loss_{k}"), stats.get(f"seq_acc_{k}"), updates)
        value = stats.get(f"{root.checkpoint.best_checkpoint_metric}_{k}")
        if value is not None and save:
            self._keep_best(k, value, model, updates, self._iterator_at(k, updates))

    def _reduced(self, logs: list) -> dict:
        """The metrics fairseq would log for ``logs`` (:meth:`reduce_metrics` in an
        aggregation of their own), as ``{name: rounded value}``."""
        from fairseq.logging import metrics

        with metrics.aggregate(new_root=True) as agg:
            self.reduce_metrics(logs, self.criterion, latest=False)
        return agg.get_smoothed_values()

    def _own_record(self, k: int) -> dict:
        """What run k's own checkpoint records where the pack's differs (runs with their own
        ``max_update``): its ``max_update``, ``train_args_sha256``, updates done and fairseq's
        iterator state at that update."""
        updates = self._own_updates(k, self._last_update_or_0())
        iterator = self._iterator_at(k, updates) if self.schedule is not None else \
            {"version": 2, "epoch": 1, "iterations_in_epoch": 0, "shuffle": True}
        return {"max_update": self.limits[k],
                "train_args_sha256": self.children[k].cfg.train_args_sha256,
                "updates": updates, "train_iterator": iterator}
