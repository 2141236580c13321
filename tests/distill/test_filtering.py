"""The rules that drop bad teacher translations, and their counts."""

import pytest

from transformer_mt.distill.filtering import FilterReport, FilterRules, TeacherFilter
from transformer_mt.errors import SettingError

PAIRS = [
    ("Ein Mann fährt Rad.", "A man rides a bike.", None),
    ("Zwei Hunde spielen im Schnee.", "", "empty"),
    ("   ", "Something.", "empty"),
    ("Eine Frau liest das Buch.", "Eine Frau liest das Buch.", "copy"),
    ("Eine Frau liest das Buch im Park.", "Eine Frau liest das Buch im Park!", "copy"),
    ("Ein Hund.", "A dog runs and runs and runs and runs and runs.", "length_ratio"),
    ("Zwei Männer in blauen Jacken stehen vor einem Haus.", "Two men.", "length_ratio"),
    ("Das Kind lacht.", "The child laughs.", None),
]


def test_each_pair_counts_under_the_first_rule_it_breaks():
    judge = TeacherFilter(FilterRules())
    assert [judge.verdict(s, t) for s, t, _ in PAIRS] == [rule for _, _, rule in PAIRS]
    assert judge.report == FilterReport(total=8, kept=2, empty=2, copy=2, length_ratio=2)
    assert str(judge.report) == (
        "kept 2 of 8 pairs; dropped 2 empty, 2 copies of the source, 2 outside the length ratio"
    )


def test_the_thresholds_move_the_bounds_and_no_rules_keep_every_pair():
    loose = TeacherFilter(FilterRules(max_length_ratio=10.0, max_source_chrf=100.0))
    assert [loose.verdict(s, t) for s, t, _ in PAIRS[3:7]] == ["copy", None, None, None]
    keep_all = TeacherFilter(None)
    assert {keep_all.verdict(s, t) for s, t, _ in PAIRS} == {None}
    assert keep_all.report == FilterReport(total=8, kept=8, empty=0, copy=0, length_ratio=0)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (FilterRules(max_length_ratio=0.5), "max_length_ratio=0.5: must be at least 1"),
        (FilterRules(max_source_chrf=101.0), "max_source_chrf=101.0: must be in [0, 100]"),
        (FilterRules(max_source_chrf=float("nan")), "max_source_chrf=nan: must be in"),
    ],
)
def test_thresholds_that_cannot_work_are_refused(rules, message):
    with pytest.raises(SettingError, match=message.replace("[", r"\[")):
        TeacherFilter(rules)
