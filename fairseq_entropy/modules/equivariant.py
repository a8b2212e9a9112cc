"""G-equivariant layers of Gordon, Lopez-Paz, Baroni, Bouchacourt (ICLR 2020).

"Permutation Equivariant Models for Compositional Generalization in Language" builds a
sequence-to-sequence model whose every hidden vector is a function on a finite group G of
word permutations, stored as a tensor ``[..., |G|, K]`` (one K-vector per group element).
G acts on such a function by shifting its argument, ``(g . f)(h) = f(g^-1 h)``, and on the
vocabulary by permuting the words of each orbit.  Every layer here commutes with that
action (Gordon et al. 2020), so a model assembled from them satisfies
``f(g . x) = g . f(x)`` by construction:

- :class:`CyclicGroup` and :class:`VocabularyAction`: the group and its action on a
  dictionary (verb equivariance).
- :class:`GEmbedding`: ``e(w)(g) = psi(g^-1 . w)``.
- :class:`GConv`: ``[f * W](g) = sum_h W(g^-1 h)^T f(h) + b``.
- :class:`GRecurrentCell`: G-RNN, G-GRU and G-LSTM cells.
- :class:`GAttention`: invariant scores, equivariant context.
- :class:`GOutputLayer`: ``logit(z) = <f, e_out(z)> + b_orbit(z)``.

The construction is restated in ``shared/design/equivariant.md``.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

CELLS = ("rnn", "gru", "lstm")
_GATES = {"rnn": 1, "gru": 3, "lstm": 4}


class CyclicGroup:
    """The cyclic group Z_n, the group of verb equivariance.

    Elements are the integers ``0 .. n-1``; the product is addition modulo n and element
    ``g`` acting on an orbit ``(o_0, ..., o_{n-1})`` maps ``o_i`` to ``o_{(i + g) mod n}``.
    Layers only use :attr:`mul` and :attr:`inv`, so any finite group given by its Cayley
    table would work the same way.

    Args:
        order: n, the number of group elements (>= 1).

    Raises:
        ValueError: if ``order < 1``.
    """

    def __init__(self, order: int):
        if order < 1:
            raise ValueError(f"a group needs at least one element, got order {order}")
        self.order = order
        idx = torch.arange(order)
        #: ``mul[a, b]`` is the index of the product ``a b``; LongTensor ``[n, n]``.
        self.mul = (idx[:, None] + idx[None, :]) % order
        #: ``inv[a]`` is the index of ``a^-1``; LongTensor ``[n]``.
        self.inv = (-idx) % order

    def __len__(self) -> int:
        return self.order

    def conv_index(self) -> Tensor:
        """Index ``u[h, g] = g^-1 h`` of the G-convolution kernel; LongTensor ``[n, n]``."""
        return self.mul[self.inv].t().contiguous()

    def act_on_functions(self, f: Tensor, g: int, dim: int) -> Tensor:
        """Return ``g . f`` with ``(g . f)(h) = f(g^-1 h)``, the group axis of ``f`` at ``dim``."""
        return f.index_select(dim, self.mul[self.inv[g]].to(f.device))


class VocabularyAction:
    """Action of a group on a vocabulary through regular orbits.

    Each orbit is a list of ``|G|`` token indices ``(o_e, o_g1, ...)`` indexed by group
    element; ``g . o_h = o_{g h}``.  Tokens in no orbit are fixed points of every ``g``
    (special symbols, ``left``, ``twice``, ``LTURN``, ...).  For verb equivariance there
    are two orbits, the verbs and their actions, in the same order.

    Args:
        group: the group (e.g. :class:`CyclicGroup`).
        vocab_size: size V of the dictionary acted on.
        orbits: token-index lists, each of length ``len(group)``.

    Raises:
        ValueError: if an orbit has the wrong length, repeats a token, shares a token with
            another orbit, or holds an index outside ``[0, V)``.
    """

    def __init__(self, group: CyclicGroup, vocab_size: int, orbits: Sequence[Sequence[int]]):
        n = len(group)
        perm = torch.arange(vocab_size).repeat(n, 1)
        seen = set()
        for orbit in orbits:
            orbit = [int(t) for t in orbit]
            if len(orbit) != n:
                raise ValueError(f"orbit {orbit} has {len(orbit)} tokens, the group has {n}")
            for t in orbit:
                if not 0 <= t < vocab_size:
                    raise ValueError(f"token index {t} outside the vocabulary of size {vocab_size}")
                if t in seen:
                    raise ValueError(f"token index {t} appears in two orbits (or twice in one)")
                seen.add(t)
            orbit_t = torch.tensor(orbit)
            for g in range(n):
                perm[g, orbit_t] = orbit_t[group.mul[g]]
        self.group = group
        self.vocab_size = vocab_size
        self.orbits = [list(map(int, o)) for o in orbits]
        #: ``perm[g, w]`` is the index of ``g . w``; LongTensor ``[n, V]``.
        self.perm = perm
        #: ``orbit_rep[w]``: the smallest token index in the orbit of ``w``; LongTensor ``[V]``.
        self.orbit_rep = perm.min(dim=0).values

    def embedding_index(self) -> Tensor:
        """Index ``[w, g] -> g^-1 . w`` of the G-embedding; LongTensor ``[V, n]``."""
        return self.perm[self.group.inv].t().contiguous()

    def act_on_tokens(self, tokens: Tensor, g: int) -> Tensor:
        """Return ``g . tokens`` (same shape), permuting every token of the batch."""
        return self.perm[g].to(tokens.device)[tokens]


class GEmbedding(nn.Module):
    """G-embedding ``e(w)(g) = psi(g^-1 . w)`` (Gordon et al.).

    A fixed-point token gets the same vector ``psi(w)`` at every ``g``.

    Args:
        action: the group action on the dictionary.
        embed_dim: K, the size of ``psi``'s vectors.
        padding_idx: row of ``psi`` kept at zero (fairseq's pad), or None.

    Shapes:
        ``tokens [*]`` (LongTensor) -> ``[*, |G|, K]``.
    """

    def __init__(self, action: VocabularyAction, embed_dim: int, padding_idx: Optional[int] = None):
        super().__init__()
        self.psi = nn.Embedding(action.vocab_size, embed_dim, padding_idx=padding_idx)
        nn.init.normal_(self.psi.weight, mean=0.0, std=embed_dim ** -0.5)
        if padding_idx is not None:
            nn.init.zeros_(self.psi.weight[padding_idx])
        self.embed_dim = embed_dim
        self.register_buffer("index", action.embedding_index(), persistent=False)

    def table(self) -> Tensor:
        """All G-embeddings at once, ``[V, |G|, K]``."""
        return self.psi(self.index)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.psi(self.index[tokens])


class GConv(nn.Module):
    """G-convolution ``[f * W](g) = sum_h W(g^-1 h)^T f(h) + b`` (Gordon et al.).

    The most general linear map between functions on G that commutes with the group
    action: one ``K x K'`` matrix ``W(u)`` per group element and a bias ``b`` shared by all
    ``g``.  It is applied as one matmul with the block matrix
    ``M[(h, k), (g, k')] = W(g^-1 h)[k, k']`` (block-circulant for Z_n).

    Args:
        group: the group.
        in_features: K.
        out_features: K'.
        bias: whether to add ``b``.

    Shapes:
        ``f [..., |G|, K]`` -> ``[..., |G|, K']``.
    """

    def __init__(self, group: CyclicGroup, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        n = len(group)
        self.order = n
        self.in_features = in_features
        self.out_features = out_features
        bound = 1.0 / math.sqrt(n * in_features)
        self.weight = nn.Parameter(
            torch.empty(n, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.register_buffer("index", group.conv_index(), persistent=False)

    def matrix(self) -> Tensor:
        """The block matrix ``M``, ``[|G| K, |G| K']``; compute once per sequence in loops."""
        n, k, k2 = self.order, self.in_features, self.out_features
        return self.weight[self.index].permute(0, 2, 1, 3).reshape(n * k, n * k2)

    def apply_matrix(self, f: Tensor, matrix: Tensor) -> Tensor:
        """``f * W`` given ``matrix = self.matrix()``; ``f [..., |G|, K]`` -> ``[..., |G|, K']``."""
        out = (f.reshape(*f.shape[:-2], -1) @ matrix).reshape(*f.shape[:-1], self.out_features)
        if self.bias is not None:
            out = out + self.bias
        return out

    def forward(self, f: Tensor) -> Tensor:
        return self.apply_matrix(f, self.matrix())


State = Tuple[Tensor, ...]


class GRecurrentCell(nn.Module):
    """G-RNN, G-GRU or G-LSTM cell (Gordon et al.).

    The usual cell equations with every linear map replaced by a :class:`GConv`; gates and
    nonlinearities act pointwise, so the cell is equivariant.  ``rnn``:
    ``h' = tanh(x * W_x + h * W_h)``; ``gru`` and ``lstm`` follow ``torch.nn.GRUCell`` and
    ``torch.nn.LSTMCell``.

    Args:
        group: the group.
        input_size: K of the inputs.
        hidden_size: H of the state.
        cell: one of ``rnn``, ``gru``, ``lstm``.

    Raises:
        ValueError: for an unknown ``cell``.

    Shapes:
        input projection ``[..., |G|, K]`` -> ``[..., |G|, gates * H]``; state is a tuple
        ``(h,)`` (rnn, gru) or ``(h, c)`` (lstm) of ``[B, |G|, H]``.
    """

    def __init__(self, group: CyclicGroup, input_size: int, hidden_size: int, cell: str = "gru"):
        super().__init__()
        if cell not in CELLS:
            raise ValueError(f"unknown cell {cell!r}; expected one of {CELLS}")
        self.cell = cell
        self.hidden_size = hidden_size
        gates = _GATES[cell]
        self.input_map = GConv(group, input_size, gates * hidden_size)
        self.hidden_map = GConv(group, hidden_size, gates * hidden_size)

    def initial_state(self, h: Tensor) -> State:
        """State tuple starting from hidden ``h [B, |G|, H]`` (LSTM memory starts at zero)."""
        return (h, torch.zeros_like(h)) if self.cell == "lstm" else (h,)

    def project_input(self, x: Tensor) -> Tensor:
        """``x * W_x`` for any number of leading dims; precompute it over a whole sequence."""
        return self.input_map(x)

    def step(self, x_proj: Tensor, state: State, hidden_matrix: Tensor) -> State:
        """One step: ``x_proj = project_input(x_t)``, ``hidden_matrix = hidden_map.matrix()``."""
        h = state[0]
        h_proj = self.hidden_map.apply_matrix(h, hidden_matrix)
        if self.cell == "rnn":
            return (torch.tanh(x_proj + h_proj),)
        if self.cell == "gru":
            xr, xz, xn = x_proj.chunk(3, dim=-1)
            hr, hz, hn = h_proj.chunk(3, dim=-1)
            r = torch.sigmoid(xr + hr)
            z = torch.sigmoid(xz + hz)
            cand = torch.tanh(xn + r * hn)
            return ((1.0 - z) * cand + z * h,)
        gi, gf, gg, go = (x_proj + h_proj).chunk(4, dim=-1)
        c = torch.sigmoid(gf) * state[1] + torch.sigmoid(gi) * torch.tanh(gg)
        return (torch.sigmoid(go) * torch.tanh(c), c)


class GAttention(nn.Module):
    """Attention with G-invariant scores and an equivariant context.

    ``score_j = sum_{g,k} q(g)_k e_j(g)_k / sqrt(|G| K)`` with ``q = s * W_q`` (a
    :class:`GConv` of the decoder state, so the score stays invariant),
    ``alpha = softmax_j(score)`` over non-padding positions, ``context = sum_j alpha_j e_j``.

    Shapes:
        ``query [B, |G|, K]``, ``keys [B, S, |G|, K]``, ``padding_mask [B, S]`` (True at pads)
        -> ``context [B, |G|, K]``, ``alpha [B, S]``.
    """

    def __init__(self, group: CyclicGroup, query_dim: int, key_dim: int):
        super().__init__()
        self.query_map = GConv(group, query_dim, key_dim, bias=False)
        self.scale = 1.0 / math.sqrt(len(group) * key_dim)

    def forward(self, query: Tensor, keys: Tensor, padding_mask: Optional[Tensor],
                query_matrix: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        if query_matrix is None:
            query_matrix = self.query_map.matrix()
        q = self.query_map.apply_matrix(query, query_matrix)
        scores = torch.einsum("bgk,bsgk->bs", q, keys) * self.scale
        if padding_mask is not None:
            scores = scores.masked_fill(padding_mask, float("-inf"))
        alpha = torch.softmax(scores, dim=-1)
        context = torch.einsum("bs,bsgk->bgk", alpha, keys)
        return context, alpha


class GOutputLayer(nn.Module):
    """Equivariant output layer ``logit(z) = sum_h <f(h), psi_out(h^-1 . z)> + b_z``.

    The logit is the inner product of the state with the G-embedding of ``z``; the bias is
    tied across each orbit (one bias for all verb actions), else equivariance breaks.

    Args:
        action: the group action on the output dictionary.
        embedding: the output G-embedding (pass the decoder's input embedding to tie them).

    Shapes:
        ``f [..., |G|, K]`` -> logits ``[..., V]``.
    """

    def __init__(self, action: VocabularyAction, embedding: GEmbedding):
        super().__init__()
        self.embedding = embedding
        self.bias = nn.Parameter(torch.zeros(action.vocab_size))
        self.register_buffer("orbit_rep", action.orbit_rep.clone(), persistent=False)

    def forward(self, f: Tensor) -> Tensor:
        table = self.embedding.table()  # [V, n, K]
        logits = f.reshape(*f.shape[:-2], -1) @ table.reshape(table.shape[0], -1).t()
        return logits + self.bias[self.orbit_rep]


def verb_orbits(
    dictionary,
    words: Optional[Sequence[str]] = None,
    actions: Optional[Sequence[str]] = None,
) -> Tuple[List[str], List[str]]:
    """The equivalent words and their actions, in group order, for a fairseq dictionary.

    Default: every lower-case word ``w`` of the dictionary whose action ``W`` (``w.upper()``,
    the paper's grammar) or ``I_W`` (original SCAN) is also in it, sorted alphabetically.
    Given ``words`` only, actions follow the same rule; given both, they are used as is.

    Returns:
        ``(words, actions)``: two lists of the same length.

    Raises:
        ValueError: if fewer than two words are found, lengths differ, or a word/action is
            not in the dictionary.
    """

    def action_of(word: str) -> Optional[str]:
        for cand in (word.upper(), "I_" + word.upper()):
            if cand != word and dictionary.index(cand) != dictionary.unk():
                return cand
        return None

    if words is None:
        if actions is not None:
            raise ValueError("give the equivariant words with the actions")
        symbols = dictionary.symbols[dictionary.nspecial:]
        words = sorted(w for w in symbols if w.islower() and action_of(w) is not None)
    words = list(words)
    if actions is None:
        actions = []
        for w in words:
            a = action_of(w)
            if a is None:
                raise ValueError(f"no action W or I_W for word {w!r} in the dictionary")
            actions.append(a)
    actions = list(actions)
    if len(words) != len(actions):
        raise ValueError(f"{len(words)} words but {len(actions)} actions")
    if len(words) < 2:
        raise ValueError(f"need at least two equivalent words, found {words}")
    for tok in words + actions:
        if dictionary.index(tok) == dictionary.unk():
            raise ValueError(f"token {tok!r} is not in the dictionary")
    return words, actions


def dictionary_action(group: CyclicGroup, dictionary, words: Sequence[str],
                      actions: Sequence[str]) -> VocabularyAction:
    """Action of ``group`` on ``dictionary``: the words and the actions each form an orbit.

    Words (or actions) absent from this dictionary are skipped as a whole, so a source-only
    or target-only dictionary works too; a partially present orbit raises ValueError.
    """
    orbits = []
    for toks in (words, actions):
        ids = [dictionary.index(t) for t in toks]
        present = [i != dictionary.unk() for i in ids]
        if all(present):
            orbits.append(ids)
        elif any(present):
            raise ValueError(f"only some of {list(toks)} are in the dictionary")
    return VocabularyAction(group, len(dictionary), orbits)
