"""A toy SCAN vocabulary, examples and task stand-in shared by the model tests."""

from fairseq.data import Dictionary

WORDS = "walk run look jump twice thrice and left right".split()
ACTIONS = "WALK RUN LOOK JUMP LTURN RTURN".split()
PAIRS = [
    ("walk", "WALK"),
    ("run twice", "RUN RUN"),
    ("jump left thrice", "LTURN JUMP LTURN JUMP LTURN JUMP"),
    ("look right and walk twice", "RTURN LOOK WALK WALK"),
    ("run left", "LTURN RUN"),
]


def make_dictionary() -> Dictionary:
    """One shared source/target dictionary of :data:`WORDS` and :data:`ACTIONS`."""
    d = Dictionary()
    for w in WORDS + ACTIONS:
        d.add_symbol(w)
    return d


class FakeTask:
    """The two attributes ``build_model`` reads from a fairseq task."""

    def __init__(self, d):
        self.source_dictionary = d
        self.target_dictionary = d


def losses_before_and_after(model, sample, pad: int, lr: float, steps: int = 20):
    """Cross-entropy of ``model`` on one batch before and after ``steps`` Adam updates on it."""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def loss_fn():
        logits, _ = model(**sample["net_input"])
        return F.cross_entropy(logits.view(-1, logits.size(-1)), sample["target"].view(-1),
                               ignore_index=pad)

    first = loss_fn().item()
    for _ in range(steps):
        opt.zero_grad()
        loss_fn().backward()
        opt.step()
    return first, loss_fn().item()
