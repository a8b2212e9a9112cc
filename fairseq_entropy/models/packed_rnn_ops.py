"""Pieces of the packed RNN's loops (:mod:`.packed_rnn_loops`): sorting stacked runs, the
cells' equations and their gradients, dropout masks, weight gradients summed once.

The runs of a loop are sorted so that those still computing at step ``t`` are the first
``n_t`` (:func:`sort_stacked`, :func:`permute_runs`); a weight's gradient is summed after the
loop with one grouped product per block of runs of similar lengths
(:func:`blocked_gradient`).  Multi-megabyte tensors are kept between updates
(:class:`Workspace`, :func:`keep_freed_memory`): on a CPU a fresh one costs a page fault per
4 KiB on first write, as much as the copy itself.
"""

import ctypes
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

_aten = torch.ops.aten


class _Permute(torch.autograd.Function):
    """``x.index_select(0, order)``; the gradient is permuted back with the inverse (one
    copy, where autograd's ``index_select`` backward scatters into zeros)."""

    @staticmethod
    def forward(ctx, x: Tensor, order: Tensor, inverse: Tensor):
        ctx.inverse = inverse
        return x.index_select(0, order)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad.index_select(0, ctx.inverse), None, None


def permute_runs(x: Tensor, order: Tensor, inverse: Tensor) -> Tensor:
    """``x`` ``(K, ...)`` with its runs in ``order`` (``inverse``: the inverse
    permutation, ``inverse[order] = arange(K)``)."""
    return _Permute.apply(x, order, inverse)


class Workspace:
    """Tensors kept from one forward pass to the next: the sorted copies of the weights.

    :meth:`claim` counts the forward passes that write a loop's buffers; a backward pass
    whose forward pass was not the last to write them rebuilds its sorted weights instead.
    """

    def __init__(self):
        self.buffers: Dict[str, Tensor] = {}
        self.generations: Dict[str, int] = {}

    def claim(self, name: str) -> int:
        """Note a forward pass writing the buffers of loop ``name``; returns its number."""
        self.generations[name] = self.generations.get(name, 0) + 1
        return self.generations[name]

    def holds(self, name: str, generation: int) -> bool:
        """Whether the buffers of loop ``name`` are still those of forward pass
        ``generation``."""
        return self.generations.get(name) == generation

    def get(self, name: str, shape: Sequence[int], like: Tensor) -> Tensor:
        """The buffer ``name`` of ``shape`` with ``like``'s dtype and device (contents
        undefined)."""
        buf = self.buffers.get(name)
        if (buf is None or buf.shape != torch.Size(shape) or buf.dtype != like.dtype
                or buf.device != like.device):
            buf = self.buffers[name] = like.new_empty(shape)
        return buf


def keep_freed_memory() -> bool:
    """Make glibc's ``malloc`` keep freed blocks of up to 32 MiB for reuse (Linux only).

    By default ``malloc`` maps a block above 128 KiB afresh and returns freed memory at the
    top of the heap to the system, so a multi-megabyte tensor allocated at every update (a
    gradient of ``K`` stacked weights, an optimiser's temporaries) is paged in again, one
    page fault per 4 KiB: for 35 runs of the batch-1 RNN about 5000 faults per update, a
    fifth of its time on a CPU.  This raises the mapping threshold to 32 MiB and the trim
    threshold to 128 MiB for the whole process (at most that much freed memory is kept).
    Returns whether both settings took.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20)
                    and libc.mallopt(m_trim_threshold, 128 << 20))
    except (OSError, AttributeError):  # not glibc
        return False


def sort_stacked(parts: Sequence[Tensor], order: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """The stacked weights ``parts`` ``(K, out_i, ...)`` with their runs in ``order``,
    concatenated along dimension 1, written into ``out`` (a new tensor if None)."""
    if out is None:
        shape = (order.numel(), sum(p.size(1) for p in parts), *parts[0].shape[2:])
        out = parts[0].new_empty(shape)
    start = 0
    for part in parts:
        torch.index_select(part, 0, order, out=out[:, start:start + part.size(1)])
        start += part.size(1)
    return out


def unsort_stacked(grad: Tensor, order: Tensor, parts: Sequence[Tensor]) -> List[Tensor]:
    """Gradients of ``parts`` from the gradient ``grad`` of their sorted concatenation
    (:func:`sort_stacked`): each part's columns, runs back in their own order (new tensors)."""
    inverse = torch.argsort(order)
    out, start = [], 0
    for part in parts:
        out.append(grad[:, start:start + part.size(1)].index_select(0, inverse))
        start += part.size(1)
    return out


class StepDropout:
    """Dropout masks for the steps of a loop over a shrinking prefix of runs.

    Masks for up to ``block`` steps are drawn at once (one random draw instead of one per
    step), for the runs active when drawn; a later step with fewer active runs uses the
    first rows.  Each entry is an independent Bernoulli draw scaled by ``1 / (1 - p)``, as
    ``F.dropout``.

    Args:
        p: the dropout probability (0: no masks).
        width: the masks' last dimension.
        like: a tensor of the masks' dtype and device.
        block: steps drawn at once.
    """

    def __init__(self, p: float, width: int, like: Tensor, block: int = 8):
        self.p, self.width, self.like, self.block = p, width, like, block
        self.masks: Optional[Tensor] = None
        self.used = 0

    def next(self, n: int, rows: int, left: int) -> Optional[Tensor]:
        """The mask ``(n, rows, width)`` of the next step (None when ``p`` is 0); ``left``:
        the most steps still to come, this one included."""
        if self.p == 0.0:
            return None
        if self.masks is None or self.used == self.masks.size(0) or self.masks.size(1) < n:
            draw = self.like.new_empty(min(self.block, left), n, rows, self.width).uniform_()
            self.masks = draw.ge_(self.p).div_(1.0 - self.p)
            self.used = 0
        self.used += 1
        return self.masks[self.used - 1, :n]


def gru_cell(gi: Tensor, gh: Tensor, h: Tensor) -> Tuple[Tensor, dict]:
    """GRU cells (PyTorch's equations): ``gi`` ``(G, B, 3H)`` the input projection with
    ``b_ih``, ``gh`` ``(G, B, 3H)`` the hidden projection with ``b_hh``, ``h`` ``(G, B, H)``
    the state.  Returns the new state ``(G, B, H)`` and what :func:`gru_cell_backward`
    needs."""
    size = h.size(-1)
    r, z = torch.sigmoid(gi[..., :2 * size] + gh[..., :2 * size]).chunk(2, dim=-1)
    gh_n = gh[..., 2 * size:]
    n = torch.tanh(torch.addcmul(gi[..., 2 * size:], r, gh_n))
    return torch.lerp(n, h, z), {"r": r, "z": z, "n": n, "gh_n": gh_n, "h": h}


def gru_cell_backward(dh: Tensor, saved: dict) -> Tuple[Tensor, Tensor, Tensor]:
    """From the new state's gradient ``dh`` ``(G, B, H)``: the gradients of the input
    projection and of the hidden projection ``(G, B, 3H)`` and the part of the previous
    state's gradient that does not pass through the hidden projection ``(G, B, H)``."""
    r, z, n, h = saved["r"], saved["z"], saved["n"], saved["h"]
    dpre_n = _aten.tanh_backward(dh * (1 - z), n)
    dr = _aten.sigmoid_backward(dpre_n * saved["gh_n"], r)
    dz = _aten.sigmoid_backward(dh * (h - n), z)
    dgi = torch.cat([dr, dz, dpre_n], dim=-1)
    dgh = torch.cat([dr, dz, dpre_n * r], dim=-1)
    return dgi, dgh, dh * z


def lstm_cell(gates: Tensor, c: Tensor) -> Tuple[Tensor, Tensor, dict]:
    """LSTM cells (PyTorch's gate order i, f, g, o): ``gates`` ``(G, B, 4H)`` both
    projections and biases summed, ``c`` ``(G, B, H)`` the cell state.  Returns the new state
    and cell state ``(G, B, H)`` and what :func:`lstm_cell_backward` needs."""
    i, f, g, o = gates.chunk(4, dim=-1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c_new = torch.addcmul(f * c, i, g)
    tc = torch.tanh(c_new)
    return o * tc, c_new, {"i": i, "f": f, "g": g, "o": o, "c": c, "tc": tc}


def lstm_cell_backward(dh: Tensor, dc: Optional[Tensor], saved: dict) -> Tuple[Tensor, Tensor]:
    """From the new state's gradient ``dh`` ``(G, B, H)`` and the new cell state's ``dc``
    (rows ``[:m]``, ``m <= G``, or None): the gradients of the pre-activations
    ``(G, B, 4H)`` and of the previous cell state ``(G, B, H)``."""
    i, f, g, o, tc = saved["i"], saved["f"], saved["g"], saved["o"], saved["tc"]
    dcell = _aten.tanh_backward(dh * o, tc)
    if dc is not None:
        dcell[:dc.size(0)] += dc
    dgates = torch.cat([_aten.sigmoid_backward(dcell * g, i),
                        _aten.sigmoid_backward(dcell * saved["c"], f),
                        _aten.tanh_backward(dcell * i, g),
                        _aten.sigmoid_backward(dh * tc, o)], dim=-1)
    return dgates, dcell * f


def padded_index(counts: List[int], groups: int, rows: int, device) -> Tensor:
    """Where each ``(group, row, step)`` lies among the steps' outputs concatenated.

    Step ``t`` computed the first ``counts[t]`` groups, ``rows`` rows each, and the steps'
    outputs are concatenated as rows ``(t, group, row)``.  Returns ``(groups, rows, T)``: the
    row index there, or the total number of rows where the step did not compute the group
    (where a row of zeros is appended)."""
    n = torch.tensor(counts, device=device)
    offsets = (torch.cumsum(n, 0) - n) * rows
    group = torch.arange(groups, device=device).view(groups, 1, 1)
    row = torch.arange(rows, device=device).view(1, rows, 1)
    index = offsets + group * rows + row
    return torch.where(group < n, index, int(n.sum()) * rows)


def run_blocks(counts: List[int], rows: int, device,
               waste: float = 0.3) -> List[Tuple[int, int, Tensor]]:
    """Blocks of the sorted runs for :func:`blocked_gradient`.

    Run ``k`` computed the steps ``t`` with ``counts[t] > k`` (non-increasing counts: its
    first steps).  A block ``(k0, k1, index)`` holds runs ``[k0:k1)``, each computing at
    least ``(1 - waste)`` times as many steps as run ``k0``; ``index`` ``((k1 - k0) * T_k0 *
    rows,)`` lists, run by run, the rows of the steps' outputs concatenated (see
    :func:`padded_index`) of run ``k``'s first ``T_k0`` steps, the appended zero row where
    it had ended."""
    length = [sum(1 for n in counts if n > k) for k in range(counts[0])]
    index = padded_index(counts, counts[0], rows, device).transpose(1, 2)  # (runs, T, rows)
    blocks, start = [], 0
    while start < len(length):
        end = start + 1
        while end < len(length) and length[end] >= (1.0 - waste) * length[start]:
            end += 1
        blocks.append((start, end, index[start:end, :length[start]].flatten()))
        start = end
    return blocks


def blocked_gradient(records: List[Tuple[Tensor, Tensor]], blocks: List[Tuple[int, int, Tensor]],
                     out: Tensor, bias: Optional[Tensor]) -> None:
    """Write into ``out`` ``(K, out, in)`` the gradient of a sorted stacked weight used as
    ``x @ weight[:n_t].T`` at every step ``t``, and into ``bias`` ``(K, out)`` (if not None)
    that of the bias added there.

    ``records`` holds each step's input ``(n_t, B, in)`` and output gradient
    ``(n_t, B, out)``, last step first; ``blocks`` are the :func:`run_blocks` of the steps'
    counts ``n_t`` (non-increasing).  Each block of runs of similar lengths is one grouped
    product over its steps (zeros where a run had ended), so each run's gradient is written
    once; runs that computed no step get zeros.
    """
    first = records[-1][0]
    xs = torch.cat([x.reshape(-1, x.size(-1)) for x, _ in reversed(records)]
                   + [first.new_zeros(1, first.size(-1))])
    gs = torch.cat([g.reshape(-1, g.size(-1)) for _, g in reversed(records)]
                   + [first.new_zeros(1, out.size(1))])
    active = blocks[-1][1]
    out[active:] = 0
    if bias is not None:
        bias[active:] = 0
    for start, end, block in blocks:
        g = gs.index_select(0, block).view(end - start, -1, gs.size(-1))
        x = xs.index_select(0, block).view(end - start, -1, xs.size(-1))
        torch.bmm(g.transpose(1, 2), x, out=out[start:end])
        if bias is not None:
            torch.sum(g, dim=1, out=bias[start:end])


def grouped_gradient(records: List[Tuple[Tensor, Tensor]], weight: Tensor) -> Tensor:
    """The gradient of a small sorted stacked weight ``(K, out, in)`` used as
    ``x @ weight[:n].T`` by steps whose inputs ``(n, M, in)`` and output gradients
    ``(n, M, out)`` are ``records``: one grouped product per run of steps with the same
    ``n`` (``M`` may differ between steps)."""
    grad = torch.zeros_like(weight)
    start = 0
    while start < len(records):
        n = records[start][0].size(0)
        end = start
        while end < len(records) and records[end][0].size(0) == n:
            end += 1
        x = torch.cat([x for x, _ in records[start:end]], dim=1)
        g = torch.cat([g for _, g in records[start:end]], dim=1)
        grad[:n].baddbmm_(g.transpose(1, 2), x)
        start = end
    return grad
