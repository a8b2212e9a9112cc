import pytest

from fairseq_entropy.scan.entropy import SlotStatistics, entropy_bits, unseen_pairs
from fairseq_entropy.scan.grammar import Grammar


@pytest.mark.parametrize("counts,expected", [
    ([5], 0.0),
    ([7, 0, 0], 0.0),
    ([1, 1], 1.0),
    ([2, 2, 2, 2], 2.0),
    ([1] * 8, 3.0),
    ([3, 1], 0.8112781244591328),          # -(3/4 log2 3/4 + 1/4 log2 1/4)
    ([2, 1, 1], 1.5),                      # 1/2*1 + 2 * 1/4*2
])
def test_entropy_hand_computed(counts, expected):
    assert entropy_bits(counts) == pytest.approx(expected, abs=1e-12)


def test_entropy_of_mapping_and_errors():
    assert entropy_bits({"walk": 4, "jump": 4}) == 1.0
    with pytest.raises(ValueError):
        entropy_bits([0, 0])
    with pytest.raises(ValueError):
        entropy_bits([1, -1])


def test_slot_statistics_by_execution_order():
    g = Grammar.paper()
    cmds = [g.parse(s) for s in ["jump after walk", "walk and run", "look after run twice",
                                 "jump left and jump"]]
    st = SlotStatistics.of(cmds, g.verbs)
    # first slot: walk, walk, run, jump ; second slot: jump, run, look, jump
    assert st.counts["first"]["walk"] == 2 and st.counts["first"]["jump"] == 1
    assert st.counts["second"]["jump"] == 2 and st.counts["second"]["look"] == 1
    assert st.entropy["first"] == pytest.approx(1.5)
    assert st.entropy["second"] == pytest.approx(1.5)
    test = SlotStatistics.of([g.parse("lunge and jump"), g.parse("walk after squat")], g.verbs)
    assert unseen_pairs(st, test) == [("lunge", "first"), ("squat", "first"), ("walk", "second")]


# ---------------------------------------------------------------- any component class
COMMANDS = ["walk left twice and jump", "run after look around right thrice",
            "squat opposite left"]
# execution order: first = walk left twice | look around right thrice | squat opposite left
#                  second = jump | run


def _stats(order="execution"):
    from fairseq_entropy.scan.entropy import ComponentStatistics
    g = Grammar.paper()
    return ComponentStatistics.of([g.parse(c) for c in COMMANDS], g.verbs, order=order)


def test_component_counts_by_execution_order_by_hand():
    s = _stats()
    assert s.counts["direction"]["first"] == {"left": 2, "right": 1, "none": 0}
    assert s.counts["direction"]["second"] == {"left": 0, "right": 0, "none": 2}
    assert s.counts["modifier"]["first"] == {"around": 1, "opposite": 1, "none": 1}
    assert s.counts["repetition"]["first"] == {"twice": 1, "thrice": 1, "none": 1}
    assert s.counts["conjunction"]["command"] == {"and": 1, "after": 1, "none": 1}
    assert {v for v, n in s.counts["verb"]["first"].items() if n} == {"walk", "look", "squat"}
    assert {v for v, n in s.counts["verb"]["second"].items() if n} == {"jump", "run"}
    # H(2/3, 1/3) = log2 3 - 2/3 = 0.918296 bits; three equal values = log2 3; one value = 0.
    assert s.entropy["direction"]["first"] == pytest.approx(0.918296, abs=1e-6)
    assert s.entropy["modifier"]["first"] == pytest.approx(1.584963, abs=1e-6)
    assert s.entropy["conjunction"]["command"] == pytest.approx(1.584963, abs=1e-6)
    assert s.entropy["direction"]["second"] == 0.0


def test_component_counts_by_surface_order_by_hand():
    s = _stats("surface")
    # written first: walk left twice | run | squat opposite left
    assert s.counts["direction"]["surface_first"] == {"left": 2, "right": 0, "none": 1}
    # written second: jump | look around right thrice
    assert s.counts["direction"]["surface_second"] == {"left": 0, "right": 1, "none": 1}
    assert s.entropy["direction"]["surface_second"] == pytest.approx(1.0)


def test_unseen_component_pairs_by_hand():
    from fairseq_entropy.scan.entropy import ComponentStatistics, unseen_component_pairs
    g = Grammar.paper()
    test = ComponentStatistics.of([g.parse("jump left and walk")], g.verbs)
    assert unseen_component_pairs(_stats(), test) == [("verb", "jump", "first"),
                                                      ("verb", "walk", "second")]


def test_unknown_component_class_is_refused():
    from fairseq_entropy.scan.entropy import component_slot_counts
    with pytest.raises(ValueError, match="unknown component class"):
        component_slot_counts([], "adverb")
    with pytest.raises(ValueError, match="slot order"):
        component_slot_counts([], "verb", order="reading")
