"""A cloud launch with no limit asks for --max-spend on a terminal, warns elsewhere; a local one or one with a limit never."""
from argparse import Namespace

import pytest

from yeto.cli.launch.limits import ask_for_limit

CLOUD = [{"cloud": "aws", "gpu": "A100", "count": 8}]
LOCAL = [{"cloud": "local", "gpu": "cpu", "count": 1}]


def args(**limits) -> Namespace:
    return Namespace(**{"max_spend": None, "max_steps": None, "max_tokens": None, "max_time": None, **limits})


def never(prompt: str) -> str:
    raise AssertionError(f"asked when it should not: {prompt}")


@pytest.mark.parametrize("fleet, a", [(LOCAL, args()), (CLOUD, args(max_steps=100)), (CLOUD, args(max_time="2h"))])
def test_no_question_for_a_local_run_or_a_cloud_run_with_a_limit(fleet, a):
    ask_for_limit(a, fleet, ask=never, interactive=True)
    assert a.max_spend is None


def test_on_a_terminal_the_answer_becomes_max_spend_and_empty_means_no_limit():
    a = args()
    ask_for_limit(a, CLOUD, ask=lambda prompt: " $25 ", interactive=True)
    assert a.max_spend == 25.0
    b = args()
    ask_for_limit(b, CLOUD, ask=lambda prompt: "", interactive=True)
    assert b.max_spend is None


@pytest.mark.parametrize("answer", ["lots", "-5", "nan"])
def test_an_answer_that_is_not_a_positive_amount_is_refused(answer):
    with pytest.raises(ValueError, match="--max-spend"):
        ask_for_limit(args(), CLOUD, ask=lambda prompt: answer, interactive=True)


def test_without_a_terminal_it_says_the_run_has_no_limit(capsys):
    a = args()
    ask_for_limit(a, CLOUD, ask=never, interactive=False)
    assert a.max_spend is None and "this cloud run has no limit" in capsys.readouterr().err
