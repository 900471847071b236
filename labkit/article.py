"""The source articles' figures (``data/<lab>.csv``) and this machine's runs, side by side.

Each CSV starts with ``#`` lines naming its source (title, author, date, link); the rows are the
figures the article published, keyed by the lab's run names. Hardware differs, so the
comparison that means something is a ratio: each method against the lab's baseline method,
in the article and in this run.
"""

from __future__ import annotations

from . import config
from .errors import UsageError


def figures(lab: str):
    """The article's figures for ``lab`` (e.g. ``"02-flash-sale"``); the source is in ``.attrs["source"]``."""
    import pandas as pd

    path = config.shipped("data") / f"{lab}.csv"
    if not path.exists():
        raise UsageError(f"No article figures for {lab!r}: expected {path}.")
    lines = path.read_text(encoding="utf-8").splitlines()
    source = [line.lstrip("#").strip() for line in lines if line.startswith("#")]
    frame = pd.read_csv(path, comment="#")
    frame.attrs["source"] = "\n".join(source)
    return frame


def beside(article, result, *, key: str = "run"):
    """The article's tps per method as a multiple of its baseline, beside an experiment's verdicts on the same arms.

    ``article`` is :func:`figures` (one row per run name in column ``key``, with ``tps``);
    ``result`` a :class:`labkit.experiment.Result` whose first arm is the baseline. Each row: the
    article's multiple (None where it had no such method), this experiment's ratio on its metric
    with the interval and the verdict (the ratio is of interleaved pairs, not of two single runs).
    """
    import pandas as pd

    published = article.set_index(key)["tps"]
    base = published.get(result.baseline)
    rows = []
    for arm in result.arms[1:]:
        found = result.verdict(arm)
        rows.append({"method": arm, "article: tps ×": _ratio(published.get(arm), base),
                     f"here: {result.metric} ×": None if found.ratio is None else round(found.ratio, 2),
                     "interval": f"{found.low:.2f}–{found.high:.2f}" if found.low is not None and found.high is not None
                     else "", "verdict": found.outcome})
    return pd.DataFrame(rows).set_index("method")


def _ratio(value, base):
    """``value / base`` to two decimals, or None when either is missing.

    >>> _ratio(23915.35, 230.27), _ratio(None, 1.0)
    (103.86, None)
    """
    if value is None or base in (None, 0) or value != value or base != base:
        return None
    return round(float(value) / float(base), 2)
