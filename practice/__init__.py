"""The practice exercises (practice/2xx_*.py, graded by practice/judge.py).

In a notebook, grade functions defined in its cells, with the same checks and sandbox:

    from practice import check
    check(204, rms_norm, gated_rms_norm)       # HTML report in Jupyter, text elsewhere; progress recorded
"""


def check(exercise, *functions, model=None, tiny=None, lang=None, **named):
    """Grade `functions` (in the order the exercise names them, or by their names) for `exercise`."""
    from practice._judge.notebook import check as _check
    return _check(exercise, *functions, model=model, tiny=tiny, lang=lang, **named)
