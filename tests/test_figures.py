"""The figures of an aggregate, drawn from committed results and inspected as matplotlib
objects: the legend beside the data, our curve and the paper's apart, a CI only over 2 seeds
or more, and a caption with N and the checkpoint."""
from pathlib import Path

from matplotlib.colors import to_rgba

from fairseq_entropy.analysis import figures
from fairseq_entropy.analysis.aggregate import aggregate

REPO = Path(__file__).resolve().parents[1]


def figure_of(results, tmp_path, drawn):
    aggregate([REPO / "results" / results / "results.tsv"], tmp_path)
    return drawn


def check_panel(ax):
    """Our line and the paper's: distinct colours and styles; the legend outside the axes."""
    ours = [c.lines[0] for c in ax.containers if c.get_label().startswith("ours")]
    paper = [ln for ln in ax.get_lines() if ln.get_label().startswith("paper")]
    assert len(ours) == 1 and len(paper) == 1
    assert to_rgba(ours[0].get_color()) != to_rgba(paper[0].get_color())
    assert ours[0].get_linestyle() != paper[0].get_linestyle()
    assert ours[0].get_marker() != paper[0].get_marker()
    legend = ax.get_legend().get_window_extent()
    assert not legend.overlaps(ax.get_window_extent())  # never over a data point
    return ax.get_legend()


def caption(fig):
    (text,) = [t.get_text() for t in fig.texts if t.get_text() != fig.get_suptitle()]
    return text


def test_one_seed_figures_claim_no_ci_and_give_n_and_the_checkpoint(tmp_path, drawn):
    figs = figure_of("demo_cpu_seed1", tmp_path, drawn)
    assert sorted(figs) == ["accuracy_vs_entropy.png", "fig_exp1.png"]
    for fig in figs.values():
        (ax,) = [a for a in fig.axes if a.get_visible()]
        labels = sorted(t.get_text() for t in check_panel(ax).get_texts())
        # one seed: the fitted logistic without a bootstrap band
        assert labels == ["logistic fit", "ours, 1 seed", "paper, mean +- std of 5 seeds"]
        assert not any("CI" in label or "band" in label for label in labels)
        assert not ax.containers[0].has_yerr  # no error bars over one seed
        assert caption(fig).startswith("N = 6000 training commands; last checkpoint.")
        assert "1 seed: no CI" in caption(fig)


def test_three_seed_figures_draw_the_ci(tmp_path, drawn):
    figs = figure_of("exp1_cnn_authors", tmp_path, drawn)
    (ax,) = [a for a in figs["fig_exp1.png"].axes if a.get_visible()]
    labels = sorted(t.get_text() for t in check_panel(ax).get_texts())
    assert labels == ["fit, 95% bootstrap band", "logistic fit", "ours, 3 seeds, 95% CI",
                      "paper, mean +- std of 5 seeds"]
    assert ax.containers[0].has_yerr
    assert "N = 6000 training commands; last checkpoint" in caption(figs["fig_exp1.png"])


def test_seeds_label():
    assert figures._seeds_label([1], False) == "1 seed"
    assert figures._seeds_label([2], True) == "2 seeds, 95% CI"
    assert figures._seeds_label([1, 3], True) == "1-3 seeds per level, 95% CI where >= 2"


def test_a_figure_without_a_paper_curve_says_none_and_keeps_its_long_title_inside(tmp_path,
                                                                                   drawn):
    """COGS has no paper curve: the caption does not describe one.  Its title (96
    characters) is wrapped so that every line lies inside the figure."""
    figs = figure_of("cogs_entropy", tmp_path, drawn)
    fig = figs["fig_cogs+case=subj_to_obj_common+gen_case.png"]
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert not [ln for ln in ax.get_lines() if ln.get_label().startswith("paper")]
    assert "paper" not in caption(fig) and caption(fig).endswith(").")
    # COGS trains on sentences: 15,956 at every level of the committed study
    assert caption(fig).startswith("N = 15956 training sentences; last checkpoint.")
    title = fig._suptitle
    assert "\n" in title.get_text()
    box, page = title.get_window_extent(), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and box.y1 <= page.y1
    assert not box.overlaps(ax.title.get_window_extent())  # nor over the panel's title
