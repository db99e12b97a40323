"""Layer 3: human calibration: import annotations, measure agreement, fit an isotonic map.

1. :func:`load_annotations` reads CSV or JSONL rows ``trajectory_id, step_index (empty /
   missing = the whole trajectory), score, annotator``; a bad row is kept in ``rejected``
   with ``file:line: field: reason`` and never costs the good rows.
2. :func:`agreement` reports Pearson, Spearman, Kendall, pairwise accuracy and MAE between
   automatic and human scores, each with a percentile bootstrap confidence interval.
3. :class:`CalibrationMap` is a monotone (isotonic, pool-adjacent-violators via
   ``scipy.optimize.isotonic_regression``) map from automatic to human scores, piecewise
   linear between its knots and flat beyond them, serialised as versioned JSON (its
   ``version`` is a content hash) and storable as a store blob.
4. :func:`calibrate` fits the map and reports agreement before and after (in-sample, and
   k-fold cross-validated so the improvement is not just the fit memorising its data).

Example:
    >>> anns = load_annotations("labels.csv")                                # doctest: +SKIP
    >>> result = calibrate(rewards, anns.items, level="trajectory")         # doctest: +SKIP
    >>> engine = RewardEngine("coding", calibration=result.map)             # doctest: +SKIP
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson

from knowlyr.errors import RewardError

__all__ = [
    "AgreementReport",
    "Annotation",
    "AnnotationError",
    "AnnotationSet",
    "CalibrationMap",
    "CalibrationResult",
    "Metric",
    "agreement",
    "auto_scores",
    "calibrate",
    "load_annotations",
]

Level = Literal["step", "trajectory"]
FORMAT_VERSION = 1


class AnnotationError(RewardError, ValueError):
    """An annotation file or row is invalid; the message names the file, line and field."""


@dataclass(frozen=True)
class Annotation:
    """One human score: of a step (``step_index``) or of a whole trajectory (``None``)."""

    trajectory_id: str
    step_index: int | None
    score: float
    annotator: str = "unknown"


@dataclass
class AnnotationSet:
    """Parsed annotations and the rows that were rejected (``file:line: field: reason``)."""

    items: list[Annotation] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)


def _row(rec: dict[str, Any], where: str) -> Annotation:
    tid = rec.get("trajectory_id")
    if tid is None or str(tid).strip() == "":
        raise AnnotationError(f"{where}: field 'trajectory_id': missing")
    raw_step = rec.get("step_index")
    step: int | None
    if raw_step is None or str(raw_step).strip() == "":
        step = None
    else:
        try:
            step = int(str(raw_step).strip())
        except ValueError:
            raise AnnotationError(
                f"{where}: field 'step_index': {raw_step!r} is not an integer (leave it empty for a whole trajectory)"
            ) from None
        if step < 0:
            raise AnnotationError(f"{where}: field 'step_index': must be >= 0, got {step}")
    raw = rec.get("score")
    try:
        score = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise AnnotationError(f"{where}: field 'score': {raw!r} is not a number") from None
    if score != score or score in (float("inf"), float("-inf")):
        raise AnnotationError(f"{where}: field 'score': {raw!r} is not a finite number")
    annotator = str(rec.get("annotator") or "unknown").strip() or "unknown"
    return Annotation(str(tid).strip(), step, score, annotator)


def load_annotations(path: str | Path, *, strict: bool = False) -> AnnotationSet:
    """Read annotations from a ``.csv`` (header row) or ``.jsonl`` file.

    Args:
        path: the file.
        strict: raise on the first bad row instead of keeping it in ``rejected``.

    Raises:
        AnnotationError: unreadable file, unknown extension, a CSV without the
            ``trajectory_id``/``score`` columns, or (``strict``) a bad row.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise AnnotationError(f"{p}: cannot read annotations: {e.strerror}") from e
    out = AnnotationSet()
    suffix = p.suffix.lower()
    rows: Iterable[tuple[int, dict[str, Any] | str]]
    if suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        cols = set(reader.fieldnames or [])
        missing = {"trajectory_id", "score"} - cols
        if missing:
            raise AnnotationError(
                f"{p}:1: header lacks column(s) {sorted(missing)}; expected trajectory_id, step_index, score, annotator"
            )
        rows = ((reader.line_num, r) for r in reader)
    elif suffix in (".jsonl", ".ndjson"):
        rows = ((n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip())
    else:
        raise AnnotationError(f"{p}: unknown annotation format {suffix!r}; use .csv or .jsonl")
    for line, rec in rows:
        where = f"{p}:{line}"
        try:
            if isinstance(rec, str):
                try:
                    rec = orjson.loads(rec)
                except orjson.JSONDecodeError as e:
                    raise AnnotationError(f"{where}: not valid JSON: {e}") from None
                if not isinstance(rec, dict):
                    raise AnnotationError(
                        f"{where}: expected a JSON object, got {type(rec).__name__}"
                    )
            out.items.append(_row(rec, where))
        except AnnotationError as e:
            if strict:
                raise
            out.rejected.append(str(e))
    return out


# -- agreement ----------------------------------------------------------------------------


@dataclass
class Metric:
    """A statistic with its bootstrap confidence interval (``nan`` when undefined)."""

    value: float
    low: float
    high: float


@dataclass
class AgreementReport:
    """Agreement between automatic and human scores over ``n`` items."""

    n: int
    pearson: Metric
    spearman: Metric
    kendall: Metric
    pairwise_accuracy: Metric
    mae: Metric
    confidence: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> str:
        """A small plain-text table."""
        lines = [f"n = {self.n}, {self.confidence:.0%} bootstrap CI"]
        for name in ("pearson", "spearman", "kendall", "pairwise_accuracy", "mae"):
            m: Metric = getattr(self, name)
            lines.append(f"{name:18} {m.value:7.3f}  [{m.low:6.3f}, {m.high:6.3f}]")
        return "\n".join(lines)


def _stats(a: Any, h: Any) -> tuple[float, float, float, float, float]:
    import numpy as np
    from scipy import stats

    with np.errstate(invalid="ignore", divide="ignore"):
        const = np.ptp(a) == 0 or np.ptp(h) == 0
        pear = float("nan") if const else float(stats.pearsonr(a, h).statistic)
        spear = float("nan") if const else float(stats.spearmanr(a, h).statistic)
        kend = float("nan") if const else float(stats.kendalltau(a, h).statistic)
    dh = np.sign(h[:, None] - h[None, :])
    da = np.sign(a[:, None] - a[None, :])
    mask = np.triu(dh != 0, 1)
    pairs = int(mask.sum())
    if pairs:
        agree = (da[mask] == dh[mask]).sum() + 0.5 * (da[mask] == 0).sum()
        pw = float(agree / pairs)
    else:
        pw = float("nan")
    mae = float(np.mean(np.abs(a - h)))
    return pear, spear, kend, pw, mae


def agreement(
    auto: Sequence[float],
    human: Sequence[float],
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> AgreementReport:
    """Pearson, Spearman, Kendall tau-b, pairwise accuracy and MAE with bootstrap CIs.

    Pairwise accuracy: over item pairs the humans rank differently, the share the automatic
    scores order the same way (an automatic tie counts half). CIs are percentile intervals
    over ``n_boot`` resamples of the items.

    Raises:
        ValueError: different lengths or fewer than 2 items.
    """
    import numpy as np

    a = np.asarray(auto, dtype=float)
    h = np.asarray(human, dtype=float)
    if a.shape != h.shape:
        raise ValueError(f"auto and human must have the same length, got {a.size} and {h.size}")
    if a.size < 2:
        raise ValueError(f"agreement needs at least 2 paired items, got {a.size}")
    point = _stats(a, h)
    rng = np.random.default_rng(seed)
    n = a.size
    sub = min(n, 1500)  # pairwise accuracy is O(n^2): resample at most this many items
    boots = np.full((n_boot, 5), np.nan)
    for b in range(n_boot):
        idx = rng.integers(0, n, size=sub)
        boots[b] = _stats(a[idx], h[idx])
    alpha = (1 - confidence) / 2
    metrics = []
    for k in range(5):
        col = boots[:, k]
        col = col[~np.isnan(col)]
        lo, hi = (
            (float(np.quantile(col, alpha)), float(np.quantile(col, 1 - alpha)))
            if col.size
            else (float("nan"),) * 2
        )
        metrics.append(Metric(point[k], lo, hi))
    return AgreementReport(n, *metrics, confidence=confidence)


# -- the calibration map ------------------------------------------------------------------


@dataclass
class CalibrationMap:
    """A monotone non-decreasing map from automatic to human scores.

    Piecewise linear through the knots ``(x[i], y[i])``, flat outside ``[x[0], x[-1]]``.
    ``level`` says what it maps: per-step rewards or trajectory totals.
    """

    x: list[float]
    y: list[float]
    level: Level = "trajectory"
    n: int = 0
    created_at: str = ""
    kind: str = "isotonic"
    format_version: int = FORMAT_VERSION

    @classmethod
    def fit(
        cls, auto: Sequence[float], human: Sequence[float], *, level: Level = "trajectory"
    ) -> CalibrationMap:
        """Isotonic regression of ``human`` on ``auto`` (equal ``auto`` values are pooled).

        Raises:
            ValueError: different lengths, no data, or an unknown level.
        """
        import numpy as np
        from scipy.optimize import isotonic_regression

        if level not in ("step", "trajectory"):
            raise ValueError(f"level must be 'step' or 'trajectory', got {level!r}")
        a = np.asarray(auto, dtype=float)
        h = np.asarray(human, dtype=float)
        if a.shape != h.shape or a.size == 0:
            raise ValueError(f"fit needs equal-length non-empty data, got {a.size} and {h.size}")
        xs, inv, counts = np.unique(a, return_inverse=True, return_counts=True)
        means = np.bincount(inv, weights=h) / counts
        fitted = isotonic_regression(means, weights=counts.astype(float), increasing=True).x
        return cls(
            x=[float(v) for v in xs],
            y=[float(v) for v in fitted],
            level=level,
            n=int(a.size),
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )

    def apply(self, values: Sequence[float]) -> list[float]:
        import numpy as np

        return [float(v) for v in np.interp(np.asarray(values, dtype=float), self.x, self.y)]

    def apply_one(self, value: float) -> float:
        return self.apply([value])[0]

    @property
    def version(self) -> str:
        """Content hash (16 hex) of the map: kind, format, level and knots."""
        doc = {
            "kind": self.kind,
            "format": self.format_version,
            "level": self.level,
            "x": self.x,
            "y": self.y,
        }
        return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]

    def to_json(self) -> bytes:
        return orjson.dumps({**asdict(self), "version": self.version}, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, data: bytes | str) -> CalibrationMap:
        """Load a map; the stored version must match its content.

        Raises:
            RewardError: not a calibration map, an unknown format, or a version mismatch.
        """
        try:
            d = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise RewardError(f"calibration map is not JSON: {e}") from e
        if not isinstance(d, dict) or d.get("kind") != "isotonic":
            raise RewardError("not a calibration map (expected kind 'isotonic')")
        if d.get("format_version") != FORMAT_VERSION:
            raise RewardError(
                f"calibration map format {d.get('format_version')!r} is not supported (expected {FORMAT_VERSION})"
            )
        version = d.pop("version", None)
        m = cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
        if len(m.x) != len(m.y) or not m.x:
            raise RewardError("calibration map knots x and y must be non-empty and of equal length")
        if version is not None and version != m.version:
            raise RewardError(
                f"calibration map version {version} does not match its content ({m.version}): the file was edited"
            )
        return m

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(self.to_json())
        return p

    @classmethod
    def load(cls, path: str | Path) -> CalibrationMap:
        return cls.from_json(Path(path).read_bytes())

    def save_to_store(self, store: Any) -> str:
        """Write the map as a content-addressed blob; returns its sha256."""
        return store.put_blob(self.to_json())

    @classmethod
    def load_from_store(cls, store: Any, digest: str) -> CalibrationMap:
        return cls.from_json(store.get_blob(digest))


# -- calibrate ------------------------------------------------------------------------------


def auto_scores(
    rewards: Iterable[Any], *, level: Level = "trajectory"
) -> dict[tuple[str, int | None], float]:
    """Automatic scores keyed like annotations: ``(trajectory_id, None)`` -> uncalibrated total,
    or ``(trajectory_id, step_index)`` -> step reward, from TrajectoryReward objects."""
    out: dict[tuple[str, int | None], float] = {}
    for r in rewards:
        if level == "trajectory":
            if r.total_raw is not None:
                out[(r.trajectory_id, None)] = r.total_raw
        else:
            for i, v in enumerate(r.step_rewards):
                if v is not None:
                    out[(r.trajectory_id, i)] = v
    return out


@dataclass
class CalibrationResult:
    """The fitted map and agreement before, after (in-sample) and after (cross-validated)."""

    map: CalibrationMap
    before: AgreementReport
    after: AgreementReport
    after_cv: AgreementReport | None
    n_matched: int
    n_unmatched: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "map_version": self.map.version,
            "level": self.map.level,
            "n_matched": self.n_matched,
            "n_unmatched": self.n_unmatched,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "after_cv": self.after_cv.to_dict() if self.after_cv else None,
        }


def calibrate(
    auto: dict[tuple[str, int | None], float] | Iterable[Any],
    annotations: Iterable[Annotation],
    *,
    level: Level = "trajectory",
    folds: int = 5,
    n_boot: int = 1000,
    seed: int = 0,
) -> CalibrationResult:
    """Fit a calibration map from automatic scores to (annotator-averaged) human scores.

    Args:
        auto: ``{(trajectory_id, step_index|None): score}`` or TrajectoryReward objects.
        annotations: human scores; those of the other level are ignored.
        level: ``"trajectory"`` (annotations without step index) or ``"step"``.
        folds: k for the cross-validated "after" report (skipped below 2k items).

    Raises:
        ValueError: fewer than 2 annotated items match an automatic score.
    """
    import numpy as np

    scores = auto if isinstance(auto, dict) else auto_scores(auto, level=level)
    by_key: dict[tuple[str, int | None], list[float]] = defaultdict(list)
    for a in annotations:
        if (a.step_index is None) == (level == "trajectory"):
            by_key[(a.trajectory_id, a.step_index)].append(a.score)
    keys = sorted(
        (k for k in by_key if k in scores), key=lambda k: (k[0], -1 if k[1] is None else k[1])
    )
    if len(keys) < 2:
        raise ValueError(
            f"calibrate needs at least 2 {level}-level annotations matching scored trajectories, got {len(keys)} "
            f"(of {len(by_key)} annotated items); check the trajectory ids and step indices"
        )
    a = np.array([scores[k] for k in keys])
    h = np.array([float(np.mean(by_key[k])) for k in keys])
    m = CalibrationMap.fit(a, h, level=level)
    before = agreement(a, h, n_boot=n_boot, seed=seed)
    after = agreement(np.asarray(m.apply(a)), h, n_boot=n_boot, seed=seed)
    after_cv = None
    if folds >= 2 and len(keys) >= 2 * folds:
        rng = np.random.default_rng(seed)
        fold = rng.permutation(len(keys)) % folds
        pred = np.empty_like(a)
        for f in range(folds):
            test = fold == f
            pred[test] = CalibrationMap.fit(a[~test], h[~test], level=level).apply(a[test])
        after_cv = agreement(pred, h, n_boot=n_boot, seed=seed)
    return CalibrationResult(m, before, after, after_cv, len(keys), len(by_key) - len(keys))
