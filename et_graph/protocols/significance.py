"""Is one model's lead larger than the noise? Confidence intervals for the difference of two
models' scores, in the designs this library's protocols produce: shared folds, seeds on one
split, and (for node scores) the scored nodes themselves.

A mean ± std table invites reading a 0.1-point lead as a win. Each function here returns the
difference of the means, a confidence interval and a two-sided p-value, so that a report can
say "ahead", "behind" or "no significant difference" and mean it.

**Folds, or splits drawn again per seed** (:func:`fold_difference`; the TU cross-validation,
an anomaly run with ``vary_split``). Both models are scored on the same test part of each
split, so the differences pair up: ``d_j = a_j - b_j``, ``j = 1..n``. The training sets of
the splits overlap, which makes the ``d_j`` positively correlated, and the plain paired
*t*-test, whose variance ``s^2 / n`` assumes independence, then claims far more than it
should. The corrected resampled *t*-test of Nadeau and Bengio (Machine Learning 52, 2003)
inflates the variance by the overlap:

.. math::

    t = \\frac{\\bar d}{\\sqrt{\\left(\\frac{1}{n} + \\frac{n_\\text{test}}{n_\\text{train}}
    \\right) s_d^2}}, \\qquad \\text{df} = n - 1,

with ``s_d^2`` the sample variance of the ``d_j``. For ``K``-fold cross-validation
``n_test / n_train = 1 / (K - 1)`` (:func:`cv_test_train_ratio`); with ``0`` it is the plain
paired test (splits with disjoint training sets).

**Seeds on one fixed split** (:func:`seed_difference`; the anomaly protocol's default, the
unsupervised runs). Every seed scores the same nodes, and a model's seed ``i`` has nothing to
do with another model's seed ``i``, so nothing pairs up: Welch's unequal-variance *t*-test
on the two samples. Its interval covers the training randomness only: it says nothing about
another split of the same graph, let alone another graph.

**The scored nodes** (:func:`node_difference`, :func:`bootstrap_node_difference`). On one
split the test nodes are a sample too: AUROC paired over them by DeLong's test (computed by
midranks), any metric by a paired class-stratified bootstrap, plus the seeds' own spread.

The fold and seed tests are small-sample *t* procedures; with 5 seeds or 10 folds they are
rough, and the correction is a heuristic (Bouckaert and Frank, PAKDD 2004, found it well
calibrated for repeated cross-validation). A lead inside the interval is reported as no significant
difference, not as a tie proven.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Optional, cast

import numpy as np
from scipy import stats

from ..exceptions import SmallSampleWarning

#: The designs of :func:`compare_to`: paired over shared test parts, or two independent
#: samples of seeds. (:func:`node_difference` adds ``"nodes"``: AUROC paired over the scored
#: nodes themselves.)
DESIGNS = ("folds", "seeds")


@dataclass(frozen=True)
class Difference:
    """``first - second`` on ``metric``: the mean difference, its confidence interval
    ``[low, high]`` and the two-sided p-value of "no difference"."""

    first: str
    second: str
    metric: str
    design: str
    n: int
    mean: float
    low: float
    high: float
    p_value: float
    confidence: float
    #: folds only: in how many folds ``first`` scored higher, the same, lower
    wins: Optional[tuple[int, int, int]] = None
    #: folds only: the correction's ``n_test / n_train`` (0 = the plain paired test)
    test_train_ratio: Optional[float] = None
    #: False for an error (MAE): then the model with the lower mean is the one ahead
    higher_is_better: bool = True

    @property
    def significant(self) -> bool:
        """The interval excludes 0 (equivalently, ``p < 1 - confidence``). Where the scores
        showed no spread the interval is one point, and the exact test's p decides
        (:func:`_interval`)."""
        if self.low == self.high:
            return self.p_value < 1 - self.confidence
        return self.low > 0 or self.high < 0

    def verdict(self) -> str:
        if not self.significant:
            return "no significant difference"
        first_ahead = (self.mean > 0) == self.higher_is_better
        return f"{self.first if first_ahead else self.second} ahead"

    def as_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["wins"] = list(self.wins) if self.wins is not None else None
        record["verdict"] = self.verdict()
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> Difference:
        """The inverse of :meth:`as_dict` (a stored ``results.json`` entry). What a table adds
        beside a difference's own fields (its verdict, its Holm-adjusted p, a summary's
        dataset) is left out."""
        own = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in record.items() if k in own}
        if fields.get("wins") is not None:
            fields["wins"] = tuple(fields["wins"])
        return cls(**fields)


def cv_test_train_ratio(folds: int) -> float:
    """``n_test / n_train`` of ``folds``-fold cross-validation: ``1 / (folds - 1)``."""
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(f"folds must be an integer >= 2, got {folds!r}")
    return 1.0 / (folds - 1)


def scored_parts_ratio(folds: int, val_fraction: float, validation_only: bool) -> float:
    """``n_test / n_train`` of the parts a cross-validation scores: the test folds
    (:func:`cv_test_train_ratio`), or for a validation-only run the inner validation parts,
    carved from each training fold, whose overlap is ``val / train``."""
    if validation_only:
        return val_fraction / (1 - val_fraction)
    return cv_test_train_ratio(folds)


def cv_scored_part(validation_only: bool) -> str:
    """What a cross-validation scores, as its difference lines name it: the test folds, or in
    a validation-only run the folds' inner validation parts."""
    return "inner validation" if validation_only else "test"


def _scores(values: Sequence[float], name: str) -> list[float]:
    scores = [float(v) for v in values]
    if len(scores) < 2:
        raise ValueError(f"{name}: a difference needs at least 2 scores per model, got "
                         f"{len(scores)} (one fold or one seed has no spread to measure)")
    if not all(math.isfinite(v) for v in scores):
        raise ValueError(f"{name}: scores must be finite, got {scores}")
    return scores


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")


#: Spreads below this fraction of the values' magnitude are rounding, not noise: equal fold
#: differences came out as 0.1000...09 and 0.0999...98, whose variance of ~1e-32 made the t
#: test say "ahead, p < 1e-30" where the exact tests below give 0.25 (and 16% of constant
#: 3-seed samples had such a variance).
ROUNDING_SPREAD = 1e-12


def _rounding(magnitudes: Sequence[float]) -> float:
    """What rounding of values of these ``magnitudes`` can amount to (:data:`ROUNDING_SPREAD`
    of the largest, or of 1)."""
    return ROUNDING_SPREAD * max(1.0, *(abs(m) for m in magnitudes))


def _variance(values: Sequence[float]) -> float:
    """The sample variance, 0 for a spread no larger than rounding (:data:`ROUNDING_SPREAD`)."""
    if max(values) - min(values) <= _rounding(values):
        return 0.0
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def _rounding_zero(value: float, *magnitudes: float) -> float:
    """``value``, or 0.0 where it is no larger than rounding (:data:`ROUNDING_SPREAD`) of the
    scores it comes from: ``0.3 - (0.1 + 0.2)`` over five seeds each was "second ahead, p
    0.008" by the rank test of complete separation (a statistics audit)."""
    return 0.0 if abs(value) <= _rounding(magnitudes) else value


def _interval(mean: float, standard_error: float, dof: float, confidence: float,
              exact_p: float = 1.0) -> tuple[float, float, float]:
    """``(low, high, p)`` of a t statistic. A zero standard error (every difference the same,
    or each model's scores constant) leaves the t procedure no noise to size: the interval is
    the one observed point, and p is ``exact_p``, the caller's exact test of that pattern (a
    sign test over paired folds, a rank test over seeds), or 1 where the difference is 0. It
    once said "ahead, p < 0.001" from two seeds of equal scores; the rank test says p 0.33."""
    if standard_error == 0.0:
        return mean, mean, 1.0 if mean == 0.0 else exact_p
    half = stats.t.ppf(0.5 + confidence / 2, dof) * standard_error
    p_value = 2.0 * stats.t.sf(abs(mean) / standard_error, dof)
    return float(mean - half), float(mean + half), float(p_value)


def fold_difference(first: Sequence[float], second: Sequence[float], *,
                    test_train_ratio: float, confidence: float = 0.95,
                    names: tuple[str, str] = ("first", "second"),
                    metric: str = "") -> Difference:
    """``first - second`` over paired folds (or splits), by the corrected resampled t-test.

    ``first[j]`` and ``second[j]`` must be the two models' scores on the same split ``j``;
    ``test_train_ratio`` is ``n_test / n_train`` of one split (:func:`cv_test_train_ratio`
    for K folds; 0 for splits with disjoint training sets, the plain paired t-test).
    """
    a, b = _scores(first, names[0]), _scores(second, names[1])
    if len(a) != len(b):
        raise ValueError(f"paired folds need as many scores for {names[0]} as for {names[1]}, "
                         f"got {len(a)} and {len(b)} (were they run on the same folds?)")
    if not (math.isfinite(test_train_ratio) and test_train_ratio >= 0):
        raise ValueError(f"test_train_ratio must be finite and >= 0, got {test_train_ratio!r}")
    _check_confidence(confidence)
    differences = [_rounding_zero(x - y, x, y) for x, y in zip(a, b)]
    n = len(differences)
    mean = sum(differences) / n
    standard_error = math.sqrt((1.0 / n + test_train_ratio) * _variance(differences))
    # without spread every fold favours one model: the exact two-sided sign test
    low, high, p_value = _interval(mean, standard_error, n - 1, confidence,
                                   exact_p=min(1.0, 2.0 * 0.5 ** n))
    wins = (sum(d > 0 for d in differences), sum(d == 0 for d in differences),
            sum(d < 0 for d in differences))
    return Difference(names[0], names[1], metric, "folds", n, mean, low, high, p_value,
                      confidence, wins, test_train_ratio)


def seed_difference(first: Sequence[float], second: Sequence[float], *,
                    confidence: float = 0.95, names: tuple[str, str] = ("first", "second"),
                    metric: str = "") -> Difference:
    """``mean(first) - mean(second)`` over independent seeds on one split: Welch's t-test."""
    a, b = _scores(first, names[0]), _scores(second, names[1])
    _check_confidence(confidence)
    mean = _rounding_zero(sum(a) / len(a) - sum(b) / len(b), *a, *b)
    low, high, p_value = _welch_interval(mean, 0.0, [a, b], confidence)
    return Difference(names[0], names[1], metric, "seeds", min(len(a), len(b)), mean, low,
                      high, p_value, confidence)


def auroc_components(labels: np.ndarray, scores: np.ndarray
                     ) -> tuple[float, np.ndarray, np.ndarray]:
    """AUROC and DeLong's structural components by midranks (Sun and Xu, IEEE SPL 2014):
    ``v10[i]``, the share of negatives that positive ``i`` outscores (ties count half), and
    ``v01[j]``, the share of positives that outscore negative ``j``. AUROC is the mean of
    either."""
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    if labels.shape != scores.shape or labels.ndim != 1:
        raise ValueError(f"labels and scores must be 1-d and of one length, got "
                         f"{labels.shape} and {scores.shape}")
    positives, negatives = scores[labels], scores[~labels]
    m, n = len(positives), len(negatives)
    if m == 0 or n == 0:
        raise ValueError("AUROC needs both classes among the scored nodes")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite")
    overall = stats.rankdata(np.concatenate([positives, negatives]))
    v10 = (overall[:m] - stats.rankdata(positives)) / n
    v01 = 1.0 - (overall[m:] - stats.rankdata(negatives)) / m
    return float(v10.mean()), v10, v01


def delong_variance(labels: np.ndarray, first: Sequence[np.ndarray],
                    second: Sequence[np.ndarray]) -> tuple[float, float]:
    """``(mean over seeds of AUROC(first[i]) - AUROC(second[i]), its DeLong variance)`` on the
    same nodes: the variance over the sampling of the positives and the negatives. AUROC is a
    mean of structural components, so the seeds' mean difference is the mean of their
    averaged components, and DeLong's variance applies to it exactly."""
    if len(first) != len(second) or not len(first):
        raise ValueError(f"DeLong's test needs the same number of seeds for both models, got "
                         f"{len(first)} and {len(second)}")
    # (0.0, then each seed's [m] and [n] component differences added: arrays from the first on)
    d10: Any = 0.0
    d01: Any = 0.0
    for a, b in zip(first, second):
        _, v10_a, v01_a = auroc_components(labels, a)
        _, v10_b, v01_b = auroc_components(labels, b)
        d10, d01 = d10 + (v10_a - v10_b), d01 + (v01_a - v01_b)
    d10, d01 = d10 / len(first), d01 / len(first)
    m, n = len(d10), len(d01)
    check_two_of_each_class(m, n, "DeLong's variance")
    variance = d10.var(ddof=1) / m + d01.var(ddof=1) / n
    return float(d10.mean()), float(variance)


#: Below this many scored nodes of a class, the intervals over the nodes under-cover (a
#: statistics audit's simulation, nominal 95%: DeLong 76% at 2 anomalies, 83% at 3, 89% at
#: 5, 93% at 15, 95% at 60), and the comparison warns.
FEW_NODES_PER_CLASS = 20
#: The fewest nodes of each class a difference over the nodes rests on: with one anomaly
#: DeLong's variance of its side is undefined (it was taken as 0, and one node gave "ahead,
#: p < 0.001"), and every bootstrap draw repeats it.
MIN_NODES_PER_CLASS = 2


def check_two_of_each_class(positives: int, negatives: int, what: str) -> None:
    if min(positives, negatives) < MIN_NODES_PER_CLASS:
        raise ValueError(f"{what} needs at least {MIN_NODES_PER_CLASS} scored nodes of each "
                         f"class, got {positives} anomalous and {negatives} normal: a "
                         "difference over so few nodes has no variance to read")


def node_difference(labels: np.ndarray, first: Sequence[np.ndarray],
                    second: Sequence[np.ndarray], *, confidence: float = 0.95,
                    names: tuple[str, str] = ("first", "second")) -> Difference:
    """AUROC of ``first`` minus ``second`` over seeds that score the same nodes, with an
    interval that covers the test nodes' sampling as well as the training randomness.

    ``first[i]`` and ``second[i]`` are seed ``i``'s scores of the nodes whose labels are
    ``labels``. The difference is the mean over seeds of each seed's AUROC difference; its
    variance is DeLong's for that mean (:func:`delong_variance`), plus the seeds' own variance
    of each model's AUROC over the seed count, as in Welch's test; the interval is a t
    interval with Welch-Satterthwaite's degrees of freedom (normal for one seed)."""
    _check_confidence(confidence)
    mean, node_variance = delong_variance(labels, first, second)
    aucs = [[auroc_components(labels, s)[0] for s in scores] for scores in (first, second)]
    low, high, p_value = _welch_interval(mean, node_variance, aucs, confidence)
    return Difference(names[0], names[1], "auroc", "nodes", len(first), mean, low, high,
                      p_value, confidence)


def _welch_interval(mean: float, known_variance: float, per_seed: Sequence[Sequence[float]],
                    confidence: float) -> tuple[float, float, float]:
    """The interval of a difference whose variance is a known part (0 for Welch's test; the
    nodes' part, from many nodes, over the nodes) plus each model's seed variance over its
    seed count (estimated from few seeds): a t interval with Welch-Satterthwaite's degrees of
    freedom, which the seed parts alone set (normal when there is one seed, or no spread
    between seeds)."""
    shares = [_variance(v) / len(v) if len(v) > 1 else 0.0 for v in per_seed]
    total = known_variance + sum(shares)
    spread = sum(share ** 2 / (len(v) - 1) for share, v in zip(shares, per_seed) if share)
    dof = total ** 2 / spread if spread else math.inf
    # without spread every seed of one model beats every seed of the other: the exact
    # two-sided rank (Mann-Whitney) test of that complete separation
    sizes = [len(v) for v in per_seed]
    exact_p = min(1.0, 2.0 / math.comb(sum(sizes), sizes[0]))
    return _interval(mean, math.sqrt(total), dof, confidence, exact_p=exact_p)


def bootstrap_node_difference(labels: np.ndarray, first: Sequence[np.ndarray],
                              second: Sequence[np.ndarray], metric: Any, *,
                              rounds: int = 2000, seed: int = 0, confidence: float = 0.95,
                              names: tuple[str, str] = ("first", "second"),
                              metric_name: str = "") -> Difference:
    """``metric(first) - metric(second)`` over seeds that score the same nodes, with the node
    sampling estimated by a paired, class-stratified bootstrap (any metric, e.g. AUPRC, which
    has no DeLong).

    ``metric(labels, scores, sample_weight)`` is a scikit-learn style metric; each round draws
    the positives and the negatives with replacement (as integer weights, the same draw for
    every seed and both models) and takes the mean over seeds of the difference. Its variance
    over the rounds plus the seeds' own variance over the seed count gives the interval, as in
    :func:`node_difference`.
    """
    labels = np.asarray(labels).astype(bool)
    if len(first) != len(second) or not len(first):
        raise ValueError(f"the bootstrap needs the same number of seeds for both models, got "
                         f"{len(first)} and {len(second)}")
    if not rounds:
        raise ValueError("rounds must be >= 100 for a variance, got 0")
    check_bootstrap_rounds(rounds)
    if labels.all() or not labels.any():
        raise ValueError("the bootstrap needs both classes among the scored nodes")
    _check_confidence(confidence)
    positives, negatives = np.flatnonzero(labels), np.flatnonzero(~labels)
    check_two_of_each_class(len(positives), len(negatives), "the bootstrap")
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(rounds):
        weight = np.zeros(len(labels))
        np.add.at(weight, rng.choice(positives, len(positives)), 1.0)
        np.add.at(weight, rng.choice(negatives, len(negatives)), 1.0)
        draws.append(np.mean([metric(labels, a, sample_weight=weight)
                              - metric(labels, b, sample_weight=weight)
                              for a, b in zip(first, second)]))
    per_seed = [[metric(labels, s) for s in scores] for scores in (first, second)]
    mean = float(np.mean(per_seed[0]) - np.mean(per_seed[1]))
    low, high, p_value = _welch_interval(mean, float(np.var(draws, ddof=1)), per_seed,
                                         confidence)
    return Difference(names[0], names[1], metric_name, "nodes", len(first), mean, low, high,
                      p_value, confidence)


def check_bootstrap_rounds(rounds: int, what: str = "bootstrap_rounds") -> None:
    """``ValueError`` naming ``what`` (the caller's own name for it) unless ``rounds`` is 0 or
    an integer >= 100."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or (rounds and rounds < 100):
        raise ValueError(f"{what} must be 0 (off) or an integer >= 100, got {rounds!r}")


def compare_nodes(labels: np.ndarray, scores: Mapping[str, Sequence[np.ndarray]],
                  reference: str, others: Sequence[str], confidence: float = 0.95,
                  bootstrap_rounds: int = 0) -> list[Difference]:
    """:func:`node_difference` (AUROC) of ``reference`` against each of ``others``, and with
    ``bootstrap_rounds`` also :func:`bootstrap_node_difference` on AUPRC; ``scores[name]``
    holds a model's per-seed scores of the nodes whose labels are ``labels``. Nothing when
    the nodes hold fewer than :data:`MIN_NODES_PER_CLASS` of either class."""
    from sklearn.metrics import average_precision_score

    check_bootstrap_rounds(bootstrap_rounds)
    labels = np.asarray(labels).astype(bool)
    smallest = min(int(labels.sum()), int((~labels).sum()))
    if smallest < MIN_NODES_PER_CLASS:
        return []
    if smallest < FEW_NODES_PER_CLASS:
        warnings.warn(
            f"the intervals over the nodes rest on {smallest} scored nodes of one class: with "
            f"fewer than {FEW_NODES_PER_CLASS} they cover less than they say (a simulation of "
            "nominal 95% intervals: 76% at 2 anomalies, 89% at 5, 93% at 15); read them as "
            "too narrow", SmallSampleWarning, stacklevel=2)
    differences = [node_difference(labels, scores[reference], scores[other],
                                   confidence=confidence, names=(reference, other))
                   for other in others]
    if bootstrap_rounds:
        differences += [bootstrap_node_difference(
            labels, scores[reference], scores[other], average_precision_score,
            rounds=bootstrap_rounds, confidence=confidence, names=(reference, other),
            metric_name="auprc") for other in others]
    return differences


def is_time_metric(metric: str) -> bool:
    """Whether ``metric`` counts time (``train_seconds``, ``epoch_seconds_median``): fewer is
    better whatever the file's direction, which is its quality metric's (a model 56 s faster
    was called behind: an output audit)."""
    return "seconds" in metric.lower()


def compare_to(models: Mapping[str, Mapping[str, Any]], reference: str,
               metrics: Sequence[str], design: str, *,
               test_train_ratio: Optional[float] = None,
               confidence: float = 0.95,
               others: Optional[Sequence[str]] = None,
               higher_is_better: bool = True) -> list[Difference]:
    """``reference - other`` for every other model (or those in ``others``) and metric of a
    results table.

    ``models`` maps a name to its metrics, each a :func:`et_graph.reporting.summarize` dict
    (its ``values`` in fold or seed order). Models or metrics with fewer than two values (a
    seed ensemble, a one-fold run) are left out, not failed; a ``reference`` that is not in
    the table is an error. ``design`` is ``"folds"`` (needs ``test_train_ratio``) or
    ``"seeds"``. ``higher_is_better`` is the quality metrics' direction; a time
    (:func:`is_time_metric`) is always better lower.
    """
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    if design == "folds" and test_train_ratio is None:
        raise ValueError("the folds design needs test_train_ratio (cv_test_train_ratio(K) "
                         "for K folds)")
    missing = [name for name in (reference, *(others or ())) if name not in models]
    if missing:
        raise ValueError(f"{missing} not among the models {sorted(models)}")

    def values(name: str, metric: str) -> list[Optional[float]]:
        stat = models[name].get(metric) or {}
        return list(stat.get("values") or ())

    def present(scores: Sequence[Optional[float]]) -> list[float]:
        return [v for v in scores if v is not None]

    differences = []
    for metric in metrics:
        mine_stored = values(reference, metric)
        for other in models if others is None else others:
            theirs_stored = values(other, metric)
            if (other == reference or len(present(mine_stored)) < 2
                    or len(present(theirs_stored)) < 2):
                continue
            if design == "folds":
                # A fold missing for one model (a stored null: a non-finite score) is left out
                # for both: dropped from each list apart, ET's fold 3 was paired with the
                # MLP's fold 2 without a word (a statistics audit). Lists of other lengths
                # cannot be paired at all (one null once made them equal: a review).
                if len(mine_stored) != len(theirs_stored):
                    raise ValueError(
                        f"paired folds need as many stored {metric} values for {reference} as "
                        f"for {other}, got {len(mine_stored)} and {len(theirs_stored)} (were "
                        "they run on the same folds?)")
                pairs = [(x, y) for x, y in zip(mine_stored, theirs_stored)
                         if x is not None and y is not None]
                mine, theirs = [x for x, _ in pairs], [y for _, y in pairs]
            else:
                mine, theirs = present(mine_stored), present(theirs_stored)
            if len(mine) < 2:  # (nulls in both left fewer than two pairs)
                continue
            names = (reference, other)
            difference = (
                # (the folds design has its ratio: checked above)
                fold_difference(mine, theirs, test_train_ratio=cast(float, test_train_ratio),
                                confidence=confidence, names=names, metric=metric)
                if design == "folds" else
                seed_difference(mine, theirs, confidence=confidence, names=names,
                                metric=metric))
            differences.append(replace(difference, higher_is_better=(
                higher_is_better and not is_time_metric(metric))))
    return differences


def signed(value: float, digits: int) -> str:
    """``value`` with its sign, a true minus sign for negatives (``+0.0120``, ``−0.0030``)."""
    return f"{value:+.{digits}f}".replace("-", "−")


def signed_limit(value: float, digits: int) -> str:
    """An interval's limit as :func:`signed`, with more digits (up to 4 more) where it would
    print as zero without being zero: ``[+0.0000, +0.0415]`` beside "ahead" read as an
    interval that touches 0 (a statistics audit)."""
    for extra in range(5):
        text = signed(value, digits + extra)
        if value == 0 or any(c in "123456789" for c in text):
            return text
    return text


def interval_text(low: float, high: float, digits: int) -> str:
    """``[low, high]``, each end by :func:`signed_limit`: every printed interval (the difference
    tables, the TU summaries, the forest plot's table) reads its sign the same way."""
    return f"[{signed_limit(low, digits)}, {signed_limit(high, digits)}]"


def format_p_near(p_value: float, alpha: float) -> str:
    """:func:`format_p`, with 4 digits where 3 would print the threshold ``alpha`` itself
    (``0.050`` for 0.0496, "ahead", and for 0.0504, not)."""
    text = format_p(p_value)
    return f"{p_value:.4f}" if text == f"{alpha:.3f}" and p_value != alpha else text


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (one family of tests), in their order: the
    k-th smallest is multiplied by ``m - k + 1`` and made monotone; a family-wise error rate
    of 5% rejects where the adjusted p is below 0.05."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def format_p(p_value: float) -> str:
    return "< 0.001" if p_value < 0.001 else f"{p_value:.3f}"


def difference_table(differences: Sequence[Difference], digits: int = 4) -> str:
    """A Markdown table of :class:`Difference` rows (folds won / tied / lost where paired),
    with each p also adjusted by Holm over the table's rows (one family), since a table of
    several baselines and metrics flags some true-zero differences by chance. The verdict
    reads the row's own interval."""
    if not differences:
        return ""
    paired = any(d.wins is not None for d in differences)
    family = len(differences) > 1
    level = {f"{d.confidence:.0%}" for d in differences}
    header = (f"| difference | metric | mean | {'/'.join(sorted(level))} interval | p "
              + ("| p, Holm over this table " if family else "")
              + ("| folds ahead / level / behind " if paired else "")
              # said beside the Holm column: "et ahead" next to an adjusted p of 0.22 read as
              # a contradiction
              + ("| verdict (this row's interval alone) |" if family else "| verdict |"))
    rule = "|---|---|---|---|---|" + ("---|" if family else "") + ("---|" if paired else "")
    rule += "---|"
    adjusted = holm([d.p_value for d in differences])
    rows = []
    for d, p_family in zip(differences, adjusted):
        alpha = 1.0 - d.confidence
        cells = [f"{d.first} − {d.second}", d.metric, signed(d.mean, digits),
                 interval_text(d.low, d.high, digits),
                 format_p_near(d.p_value, alpha),
                 *([format_p_near(p_family, alpha)] if family else [])]
        if paired:
            cells.append("/".join(map(str, d.wins)) if d.wins is not None else "")
        cells.append(d.verdict())
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join([header, rule, *rows])


def describe_design(design: str, n: int, test_train_ratio: Optional[float] = None,
                    confidence: float = 0.95, paired_over: Optional[str] = None,
                    bootstrap_rounds: int = 0, scored: str = "test") -> str:
    """One line for a report: which test the difference table used, and what it covers.
    ``scored`` names the part the scores come from (``"validation"`` in a validation-only
    run, whose lines once said "test"; ``"all"`` where every node is scored, as the
    unsupervised protocol does)."""
    if paired_over is None:
        paired_over = ("shared test folds" if scored == "test"
                       else f"shared folds' {scored} parts")
    if design == "nodes":
        # (one seed has no spread to read: the interval is that training's alone, and said it
        # covered the training randomness: a statistics audit)
        covers = ("the sampling of these nodes and the training randomness, not another split"
                  if n > 1 else "the sampling of these nodes for this one training only, not "
                  "the training randomness (one seed) nor another split")
        return (f"AUROC differences paired over the scored nodes (DeLong) and {n} seed(s): "
                f"{confidence:.0%} interval and two-sided p, with DeLong's variance of the "
                "seeds' mean difference plus the seeds' own variance (t, Welch-Satterthwaite "
                f"degrees of freedom); they cover {covers}"
                + (f"; AUPRC the same way, its node variance from a paired class-stratified "
                   f"bootstrap ({bootstrap_rounds} draws, seed 0)" if bootstrap_rounds else ""))
    if design == "folds":
        correction = (f"Nadeau and Bengio's corrected resampled t-test (variance × (1/{n} + "
                      f"{test_train_ratio:.3g}) for the overlapping training sets)"
                      if test_train_ratio else "the paired t-test")
        return (f"differences: paired over {n} {paired_over}, {confidence:.0%} interval "
                f"and two-sided p from {correction}")
    nodes = "every node of the graph" if scored == "all" else f"the same {scored} set"
    return (f"differences: Welch's t-test over {n} seeds scoring {nodes}, "
            f"{confidence:.0%} interval and two-sided p; they cover the training randomness "
            "only, not another split or graph")


def difference_section(results: Mapping[str, Any], digits: int = 4) -> str:
    """The stored ``results["differences"]`` as a Markdown table with its design line under
    it ("" when a run has none): what ``results.md`` shows below the scores."""
    differences = [Difference.from_dict(d) for d in results.get("differences") or ()]
    if not differences:
        return ""
    design = results.get("differences_design")
    few = min(d.n for d in differences)
    caution = (f" With {few} runs an interval rests on very few degrees of freedom and can "
               "reach past the metric's possible range: it says little either way."
               if few < 3 and differences[0].design != "nodes" else "")
    return (difference_table(differences, digits) + (f"\n\n{design}." if design else "")
            + caution)


def difference_sections(results: Mapping[str, Any], digits: int = 4) -> list[str]:
    """A run's difference tables: ``results["differences"]`` (over folds or seeds), then
    ``results["node_differences"]`` (AUROC over the scored nodes and the seeds), each with its
    design line; empty ones left out."""
    nodes = {"differences": results.get("node_differences"),
             "differences_design": results.get("node_differences_design")}
    sections = [difference_section(results, digits), difference_section(nodes, digits)]
    if all(sections):  # two tables with one header: say which is which
        sections = [f"**Differences over the runs** (the training randomness)\n\n{sections[0]}",
                    f"**Differences over the scored nodes and the runs** (AUROC by "
                    f"DeLong, AUPRC by a bootstrap where drawn)\n\n{sections[1]}"]
    return [section for section in sections if section]


def results_entries(differences: Sequence[Difference], design: str,
                    prefix: str = "") -> dict[str, Any]:
    """``{PREFIXdifferences: [...], PREFIXdifferences_design: design}`` for a results dict,
    or ``{}`` when there is no difference to report (``prefix="node_"`` for DeLong's)."""
    if not differences:
        return {}
    return {f"{prefix}differences": difference_records(differences),
            f"{prefix}differences_design": design}


def cv_difference_entries(models: Mapping[str, Mapping[str, Any]], metrics: Sequence[str],
                          folds: int, val_fraction: float, folds_run: int,
                          validation_only: bool = False, reference: str = "et"
                          ) -> dict[str, Any]:
    """A cross-validation's :func:`results_entries`: ``reference`` minus every other model,
    paired over the shared folds (:func:`compare_to`, design ``"folds"``, the overlap of the
    scored parts from :func:`scored_parts_ratio`), described over the ``folds_run`` folds
    that ran; ``{}`` without ``reference`` among the models."""
    ratio = scored_parts_ratio(folds, val_fraction, validation_only)
    differences = (compare_to(models, reference, metrics, "folds", test_train_ratio=ratio)
                   if reference in models else [])
    return results_entries(differences, describe_design(
        "folds", folds_run, ratio, scored=cv_scored_part(validation_only)))


def difference_records(differences: Sequence[Difference]) -> list[dict[str, Any]]:
    """Each row's :meth:`Difference.as_dict` plus ``p_holm``: its p adjusted by Holm over the
    rows (one family, as :func:`difference_table` prints it; the row's own p where there is
    one row), so that a program reads the table's verdicts without its Markdown (the JSON
    lacked the adjusted p the README quotes: an output audit)."""
    adjusted = holm([d.p_value for d in differences])
    return [{**d.as_dict(), "p_holm": p} for d, p in zip(differences, adjusted)]
