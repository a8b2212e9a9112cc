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
