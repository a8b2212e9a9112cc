"""``split_by_length``: a collated translation batch cut into parts of similar target length
(the ``systematicity`` task's ``--length-chunks``)."""

import torch


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
        left_pad_source: whether ``src_tokens`` is padded on the left (fairseq's default).

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
