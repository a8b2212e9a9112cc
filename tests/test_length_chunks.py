"""``--length-chunks``: a batch computed as length-sorted parts gives the batch's loss and
gradient (the parts are checked against the whole batch with dropout off)."""

import argparse
from types import SimpleNamespace

import pytest
import torch
from fairseq.criterions.cross_entropy import CrossEntropyCriterion
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

import fairseq_entropy  # noqa: F401  (registers the models)
from fairseq_entropy.data import split_by_length
from fairseq_entropy.tasks.systematicity import SystematicityTask

from _toy import PAIRS, FakeTask, make_dictionary, make_sample  # noqa: E402

MORE = PAIRS + [("walk left and run", "LTURN WALK RUN"), ("look thrice", "LOOK LOOK LOOK"),
                ("jump", "JUMP")]


def test_parts_are_sorted_trimmed_and_add_up():
    d = make_dictionary()
    sample = make_sample(d, MORE)
    pad = d.pad()
    parts = split_by_length(sample, 3, pad)
    assert [p["nsentences"] for p in parts] == [3, 3, 2]          # tensor_split of 8
    assert sum(p["ntokens"] for p in parts) == sample["ntokens"]
    assert sorted(i for p in parts for i in p["id"].tolist()) == sorted(sample["id"].tolist())
    lengths = [p["target"].ne(pad).sum(1) for p in parts]
    # sorted by target length across parts; each part padded to its own longest target
    assert [int(x.max()) for x in lengths] == [p["target"].size(1) for p in parts]
    assert all(int(a.max()) <= int(b.min()) for a, b in zip(lengths, lengths[1:]))
    for p in parts:  # left-padded sources keep only the columns the part needs
        src = p["net_input"]["src_tokens"]
        assert src.size(1) == int(p["net_input"]["src_lengths"].max())
        assert src[:, -1].ne(pad).all()
        assert p["net_input"]["prev_output_tokens"].shape == p["target"].shape
    # each sentence keeps its own tokens
    full = {i: sample["target"][k][sample["target"][k].ne(pad)].tolist()
            for k, i in enumerate(sample["id"].tolist())}
    for p in parts:
        for k, i in enumerate(p["id"].tolist()):
            assert p["target"][k][p["target"][k].ne(pad)].tolist() == full[i]
    assert split_by_length(sample, 1, pad) == [sample]
    assert len(split_by_length(sample, 20, pad)) == 8               # at most one per sentence


@pytest.mark.parametrize("arch", ["scan_cnn_paper", "scan_transformer_paper"])
def test_chunked_step_gives_the_batch_loss_and_gradient(arch):
    d = make_dictionary()
    args = argparse.Namespace(dropout=0.0, max_source_positions=64, max_target_positions=64)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(0)
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, FakeTask(d))
    criterion = CrossEntropyCriterion(FakeTask(d), sentence_avg=False)
    sample = make_sample(d, MORE)

    model.train()
    loss, size, log = criterion(model, sample)
    loss.backward()
    whole = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()

    task = SystematicityTask.__new__(SystematicityTask)   # only what the step reads
    task.cfg = SimpleNamespace(length_chunks=3, left_pad_source=True)
    task.tgt_dict = d
    optimizer = SimpleNamespace(backward=lambda loss: loss.backward())
    c_loss, c_size, c_log = task._chunked_train_step(sample, model, criterion, optimizer,
                                                     update_num=0)
    assert c_size == size == sample["ntokens"]
    assert float(c_loss) == pytest.approx(float(loss.detach()), rel=1e-5)
    assert c_log["ntokens"] == log["ntokens"] and c_log["nsentences"] == log["nsentences"]
    assert float(c_log["loss"]) == pytest.approx(float(log["loss"]), rel=1e-5)
    # float32 sums of three chunks against one batch differ by rounding relative to the
    # tensor's scale (measured at most 6e-6 x max|grad|, on elements near 0), while a chunk
    # weighted wrongly is off by a fraction of the gradient itself
    for n, p in model.named_parameters():
        if n in whole:
            atol = 1e-5 * float(whole[n].abs().max()) + 1e-6
            torch.testing.assert_close(p.grad, whole[n], rtol=1e-4, atol=atol, msg=n)
