"""Packed runs: K ordinary models of one architecture trained side by side in one process.

:class:`VmapPacked` is the default packed implementation (protocol:
:mod:`fairseq_entropy.models.packed_registry`): the K models' parameters are stacked along a
new first dimension (``torch.func.stack_module_state``) and one forward computes the K runs'
losses with ``torch.func.functional_call`` under ``torch.func.vmap`` (``randomness=
"different"``: every run draws its own dropout masks), as PyTorch's model-ensembling recipe.
The K runs' batches are padded to one shape (extra rows copy a real row and have an all-pad
target; extra columns are pads), which changes no run's loss: every model here computes each
sentence as it would alone, and pad targets are not in the loss.  The models' teacher-forced
passes that stack the real tokens (data-dependent shapes) run on the padded layout inside
:func:`fairseq_entropy.modules.real_tokens.all_rows`.

The parameters of different runs never meet in an operation, so the sum of the K runs' losses
(each normalised by its own sample size) gives every run its own gradient in one backward.

:class:`PackedModel` is what the ``packed_systematicity`` task hands to fairseq's trainer: the
stacked parameters (the optimizer's), K ordinary models for validation and decoding
(:meth:`PackedModel.synced`), and fairseq's model interface (``max_positions``,
``load_state_dict(..., model_cfg=...)``).
"""

import copy
import types
from typing import Callable, Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.criterions.cross_entropy import CrossEntropyCriterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion, label_smoothed_nll_loss)
from fairseq.models import BaseFairseqModel
from torch import Tensor
from torch.func import functional_call, stack_module_state, vmap

from ..criterions.teacher_forcing import TeacherForcingCrossEntropyCriterion
from ..errors import PackedError, UserError  # noqa: F401  (PackedError also read from here)
from ..modules.real_tokens import all_rows
from .packed_registry import PACKED_IMPLEMENTATIONS


#: module class -> a forward written for vmap, bound to that module in the vmapped copy
VMAP_FORWARDS: Dict[type, Callable] = {}


def register_vmap_forward(module_cls: type) -> Callable[[Callable], Callable]:
    """Decorator: use the decorated function as the ``forward`` of every ``module_cls``
    submodule of the model that :class:`VmapPacked` runs under vmap (for modules whose own
    forward has data-dependent control flow or functions vmap cannot run)."""
    def decorator(fn: Callable) -> Callable:
        VMAP_FORWARDS[module_cls] = fn
        return fn

    return decorator


def packed_implementation(model: nn.Module) -> type:
    """The packed implementation class of ``model``'s class (or of its nearest registered base
    class): :data:`PACKED_IMPLEMENTATIONS`, else :class:`VmapPacked`."""
    for cls in type(model).__mro__:
        if cls in PACKED_IMPLEMENTATIONS:
            return PACKED_IMPLEMENTATIONS[cls]
    return VmapPacked


def _criterion_kind(criterion) -> str:
    """``"nll"`` (cross_entropy; teacher_forcing_cross_entropy at ratio 1 without
    stop-at-predicted-eos or mean-over-target-length) or ``"smoothed"``
    (label_smoothed_cross_entropy).

    Raises:
        PackedError: another criterion or setting, which the vmap implementation lacks.
    """
    if isinstance(criterion, TeacherForcingCrossEntropyCriterion):
        if criterion.teacher_forcing_ratio >= 1.0 and not criterion.stop_at_predicted_eos \
                and not criterion.mean_over_target_length:
            return "nll"
    elif isinstance(criterion, LabelSmoothedCrossEntropyCriterion):
        if not criterion.ignore_prefix_size:
            return "smoothed"
    elif isinstance(criterion, CrossEntropyCriterion):
        return "nll"
    raise PackedError(
        f"packed runs: criterion {type(criterion).__name__} (with these options) has no packed "
        "loss. Fix: use --criterion cross_entropy, label_smoothed_cross_entropy or "
        "teacher_forcing_cross_entropy with --teacher-forcing-ratio 1 (no "
        "--stop-at-predicted-eos, no --mean-over-target-length)")


def _common_rows(tokens: List[Tensor], pad: int) -> Tensor:
    """Per run, the indices of its real tokens in the flattened ``[B * T]`` batch, then
    repeats of its first pad position up to the runs' largest count: ``[K, n]`` (the rows of
    :func:`~fairseq_entropy.modules.real_tokens.all_rows`; every run with fewer real tokens than
    n has a pad position, since all runs share one padded shape)."""
    real = [t.reshape(-1).ne(pad) for t in tokens]
    n = max(int(r.sum()) for r in real)
    out = []
    for r in real:
        idx = r.nonzero().squeeze(1)
        if idx.numel() < n:
            filler = (~r).nonzero()[0]
            idx = torch.cat([idx, filler.expand(n - idx.numel())])
        out.append(idx)
    return torch.stack(out)


def _copy_model(model: nn.Module) -> nn.Module:
    """``copy.deepcopy(model)``, also for modules holding computed (non-leaf) tensors as plain
    attributes, such as ``torch.nn.utils.weight_norm``'s weight (copied detached; the module
    recomputes it before every forward)."""
    saved = []
    for module in model.modules():
        for key, value in list(vars(module).items()):
            if torch.is_tensor(value) and value.grad_fn is not None:
                saved.append((module, key, value))
                module.__dict__[key] = value.detach()
    try:
        return copy.deepcopy(model)
    finally:
        for module, key, value in saved:
            module.__dict__[key] = value


def _pad_to(t: Tensor, rows: int, cols: int, pad: int, left: bool) -> Tensor:
    """``t [B, L]`` as ``[rows, cols]``: columns of ``pad`` added on the left (``left``) or
    right, then rows of ``pad`` added below."""
    b, length = t.shape
    if cols > length:
        extra = t.new_full((b, cols - length), pad)
        t = torch.cat([extra, t] if left else [t, extra], dim=1)
    if rows > b:
        t = torch.cat([t, t.new_full((rows - b, cols), pad)], dim=0)
    return t


class VmapPacked(nn.Module):
    """The default packed implementation: stacked parameters, ``vmap`` over the runs.

    Args:
        models: K ordinary fairseq encoder-decoder models of one architecture and config
            (their parameters are copied into the stack; the list is kept, unregistered, as
            the modules ``functional_call`` runs and :meth:`unpacked_state_dicts` fills).

    Parameters: one ``[K, ...]`` tensor per parameter of the model, registered under the
    parameter's name with ``.`` written ``__``.
    """

    def __init__(self, models: List[nn.Module]):
        super().__init__()
        if not models:
            raise PackedError("packed runs: no model to pack. Fix: list at least one run")
        params, _ = stack_module_state(models)
        self.names = list(params)
        for name, value in params.items():
            self.register_parameter(name.replace(".", "__"), nn.Parameter(value))
        self.__dict__["models"] = list(models)
        # the module functional_call runs (its own parameters are never read)
        self.__dict__["base"] = _copy_model(models[0])
        for module in self.base.modules():
            forward = VMAP_FORWARDS.get(type(module))
            if forward is not None:
                module.forward = types.MethodType(forward, module)

    @property
    def k(self) -> int:
        """The number of runs K in the pack."""
        return len(self.models)

    def stacked(self) -> Dict[str, Tensor]:
        """The stacked parameters by the model's parameter names: ``{name: [K, ...]}``."""
        return {name: getattr(self, name.replace(".", "__")) for name in self.names}

    def _apply(self, fn, *args, **kwargs):
        super()._apply(fn, *args, **kwargs)
        for m in self.models + [self.base]:
            m._apply(fn, *args, **kwargs)
        return self

    def unpacked_state_dicts(self) -> List[Dict[str, Tensor]]:
        """Run k's ordinary ``state_dict`` for every k (copies; loadable by the ordinary
        model)."""
        out = []
        stacked = self.stacked()
        with torch.no_grad():
            for k, model in enumerate(self.models):
                for name, p in model.named_parameters():
                    p.copy_(stacked[name][k])
                out.append({n: t.detach().clone() for n, t in model.state_dict().items()})
        return out

    def load_unpacked(self, k: int, state_dict: Dict[str, Tensor]) -> None:
        """Put the ordinary ``state_dict`` of one model into run ``k`` of the stack."""
        model = self.models[k]
        model.load_state_dict(state_dict, strict=True)
        stacked = self.stacked()
        with torch.no_grad():
            for name, p in model.named_parameters():
                stacked[name][k].copy_(p)

    def run_losses(self, samples: List[Optional[dict]], criterion) -> List[Optional[dict]]:
        """The K runs' losses of their samples in one vmapped forward.

        Args:
            samples: K fairseq translation batches (``net_input`` with ``src_tokens [B_k,
                S_k]``, ``src_lengths``, ``prev_output_tokens [B_k, T_k]``; ``target``), or None
                for a run without a batch this step.
            criterion: the runs' ordinary criterion (see :func:`_criterion_kind`).

        Returns:
            per run, None (no sample) or ``{"loss": 0-d tensor (the criterion's summed loss),
            "sample_size": int, "logging": the criterion's logging output}``.

        Raises:
            PackedError: the criterion has no packed loss.
        """
        kind = _criterion_kind(criterion)
        present = [k for k, s in enumerate(samples) if s is not None]
        if not present:
            return [None] * len(samples)
        pad = criterion.padding_idx
        left = bool(getattr(getattr(criterion.task, "cfg", None), "left_pad_source", True))
        rows = max(samples[k]["target"].size(0) for k in present)
        src_len = max(samples[k]["net_input"]["src_tokens"].size(1) for k in present)
        tgt_len = max(samples[k]["target"].size(1) for k in present)
        src, lengths, prev, target = [], [], [], []
        for k in present:
            net = samples[k]["net_input"]
            b = net["src_tokens"].size(0)
            # extra rows: the run's shortest source and a one-token decoder input, whose
            # all-pad target puts nothing in the loss
            short = int(net["src_lengths"].argmin())
            s = _pad_to(net["src_tokens"], rows, src_len, pad, left)
            s[b:] = s[short]
            src.append(s)
            n = net["src_lengths"]
            lengths.append(torch.cat([n, n[short:short + 1].expand(rows - b)]))
            p = _pad_to(net["prev_output_tokens"], rows, tgt_len, pad, False)
            p[b:, 0] = p[0, 0]
            prev.append(p)
            target.append(_pad_to(samples[k]["target"], rows, tgt_len, pad, False))
        src_rows, prev_rows = _common_rows(src, pad), _common_rows(prev, pad)
        stacked = self.stacked()
        params = {name: value[present] if len(present) < self.k else value
                  for name, value in stacked.items()}
        buffers = dict(self.base.named_buffers())
        base = self.base
        base.train(self.training)
        eps = float(getattr(criterion, "eps", 0.0))

        def one(p, src_tokens, src_lengths, prev_tokens, tgt, src_r, prev_r):
            with all_rows({id(src_tokens): src_r, id(prev_tokens): prev_r}):
                out = functional_call(base, (p, buffers), (src_tokens, src_lengths,
                                                           prev_tokens))
            lprobs = base.get_normalized_probs(out, log_probs=True)
            flat = lprobs.view(-1, lprobs.size(-1))
            if kind == "smoothed":
                loss, nll = label_smoothed_nll_loss(flat, tgt.view(-1), eps, ignore_index=pad)
            else:
                loss = F.nll_loss(flat, tgt.view(-1), ignore_index=pad, reduction="sum")
                nll = loss
            return loss, nll, lprobs.argmax(dim=-1)

        loss, nll, pred = vmap(one, randomness="different")(
            params, torch.stack(src), torch.stack(lengths), torch.stack(prev),
            torch.stack(target), src_rows, prev_rows)
        results: List[Optional[dict]] = [None] * len(samples)
        for i, k in enumerate(present):
            results[k] = self._result(criterion, kind, samples[k], loss[i], nll[i], pred[i])
        return results

    @staticmethod
    def _result(criterion, kind: str, sample: dict, loss: Tensor, nll: Tensor,
                pred: Tensor) -> dict:
        """The ordinary criterion's ``sample_size`` and logging output for one run."""
        target = sample["target"]
        bsz = target.size(0)
        sample_size = bsz if criterion.sentence_avg else sample["ntokens"]
        log = {"loss": loss.data, "ntokens": sample["ntokens"], "nsentences": bsz,
               "sample_size": sample_size}
        if kind == "smoothed":
            log["nll_loss"] = nll.data
        if isinstance(criterion, TeacherForcingCrossEntropyCriterion):
            with torch.no_grad():
                gold = target.ne(criterion.padding_idx)
                correct = pred[:bsz, :target.size(1)].eq(target) & gold
                log["n_correct"] = int(correct.sum())
                log["n_seq_correct"] = int((correct | ~gold).all(dim=1).sum())
                log["ntokens"] = int(gold.sum())
        return {"loss": loss, "sample_size": sample_size, "logging": log}


class PackedModel(BaseFairseqModel):
    """K runs' models as one fairseq model: the packed implementation ``impl`` (whose
    parameters the optimizer updates) and the K ordinary models (unregistered) that
    :meth:`synced` fills with a run's current weights for validation and decoding.

    Args:
        models: the K ordinary models, built as each run alone builds its model (kept, not
            copied: decoders built for them keep working on the synced weights).
        impl_cls: the packed implementation class (default: :func:`packed_implementation`).
    """

    def __init__(self, models: List[nn.Module], impl_cls: Optional[type] = None):
        super().__init__()
        impl_cls = impl_cls or packed_implementation(models[0])
        self.__dict__["models"] = list(models)
        self.impl = impl_cls(models)

    @property
    def k(self) -> int:
        return len(self.models)

    def _apply(self, fn, *args, **kwargs):
        super()._apply(fn, *args, **kwargs)
        for m in self.models:
            m._apply(fn, *args, **kwargs)
        return self

    def synced(self, k: int) -> nn.Module:
        """Run ``k``'s ordinary model holding its current weights (train/eval mode as this
        module)."""
        model = self.models[k]
        model.load_state_dict(self.impl.unpacked_state_dicts()[k], strict=True)
        return model.train(self.training)

    def run_losses(self, samples: List[Optional[dict]], criterion) -> List[Optional[dict]]:
        """:meth:`impl.run_losses <VmapPacked.run_losses>` in this module's mode."""
        self.impl.train(self.training)
        return self.impl.run_losses(samples, criterion)

    def unpacked_state_dicts(self) -> List[Dict[str, Tensor]]:
        """Run k's ordinary state dict for every k."""
        return self.impl.unpacked_state_dicts()

    def forward(self, *args, **kwargs):
        """Refused: the pack trains through :meth:`run_losses`, and a run decodes as its
        ordinary model.

        Raises:
            PackedError: always, naming ``fairseq-entropy unpack``.
        """
        raise PackedError("packed runs: a packed model has no single forward. Fix: decode an "
                          "unpacked checkpoint (fairseq-entropy unpack)")

    def max_positions(self):
        """The runs' (shared) maximum source and target lengths, as each ordinary model."""
        return self.models[0].max_positions()

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """fairseq's call (``model_cfg`` is ignored: the packed keys are the impl's)."""
        return nn.Module.load_state_dict(self, state_dict, strict=strict)
