import pytest

from fairseq_entropy.scan.grammar import Grammar, GrammarError


def read_scan(path):
    pairs = set()
    for line in open(path):
        cmd, act = line.strip()[len("IN: "):].split(" OUT: ")
        pairs.add((cmd, act))
    return pairs


def test_enumerating_original_scan_gives_tasks_txt(scan_reference):
    g = Grammar.scan()
    ours = [(str(c), " ".join(g.interpret(c))) for c in g.commands()]
    assert len(ours) == 20910 == len(set(ours))
    assert set(ours) == read_scan(scan_reference / "tasks.txt")


def test_interpreter_on_every_scan_split_line(scan_reference):
    g = Grammar.scan()
    for name in ("tasks_train_addprim_jump.txt", "tasks_test_length.txt"):
        for cmd, act in read_scan(scan_reference / name):
            assert " ".join(g.interpret(cmd)) == act


@pytest.mark.parametrize("cmd,actions", [
    ("jump twice after walk left", "LTURN WALK JUMP JUMP"),
    ("walk and run", "WALK RUN"),
    ("walk after run", "RUN WALK"),
    ("lunge opposite right", "RTURN RTURN LUNGE"),
    ("squat around left twice", " ".join(["LTURN SQUAT"] * 8)),
    ("crawl thrice and sprint right", "CRAWL CRAWL CRAWL RTURN SPRINT"),
])
def test_paper_semantics(cmd, actions):
    assert " ".join(Grammar.paper().interpret(cmd)) == actions


def test_slots_follow_execution_order():
    g = Grammar.paper()
    c = g.parse("jump twice after walk left")
    assert (c.first.verb, c.second.verb) == ("walk", "jump")
    c = g.parse("jump twice and walk left")
    assert (c.first.verb, c.second.verb) == ("jump", "walk")


def test_command_space_sizes():
    g = Grammar.paper()
    assert len(g.clauses()) == 8 * 7 * 3 == 168
    assert len(g.clauses("jump")) == 21
    assert sum(1 for _ in g.commands(one_clause=False)) == 2 * 168 * 168 == 56448


def test_scan_vocabulary_with_paper_actions():
    g = Grammar.scan("paper")
    assert g.interpret("turn left and jump") == ["LTURN", "JUMP"]
    assert Grammar.scan().interpret("turn around right") == ["I_TURN_RIGHT"] * 4


@pytest.mark.parametrize("bad", ["fly twice", "walk left left", "walk opposite", "turn",
                                 "walk and run and look", "walk twice left", ""])
def test_parse_errors(bad):
    with pytest.raises(GrammarError):
        Grammar.paper().parse(bad)
