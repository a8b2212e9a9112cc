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
