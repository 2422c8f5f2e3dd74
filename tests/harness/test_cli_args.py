"""The shared argparse types of :mod:`harness.args` that no command's own test covers."""

import argparse

import pytest

from harness.args import name_list


def test_a_name_list_takes_known_names_and_refuses_any_other_naming_the_choices():
    parse = name_list(("ours", "h100", "random"))
    assert parse("h100") == ["h100"]
    assert parse(" ours, random ,") == ["ours", "random"]
    for bad in ("", ",", "ours,nowhere", "H100"):
        with pytest.raises(argparse.ArgumentTypeError, match="ours, h100, random"):
            parse(bad)


def test_a_name_list_refuses_a_name_given_twice():
    """``--plants ours,ours`` ran every run of "ours" twice and printed its rows twice (the
    load-step and foresight benchmarks); a number list already refused a value twice."""
    parse = name_list(("ours", "h100", "random"))
    with pytest.raises(argparse.ArgumentTypeError, match="ours given more than once"):
        parse("ours,h100, ours")
