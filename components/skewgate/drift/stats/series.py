"""Anytime-valid nightly monitoring: the probability of *any* false alarm over an unbounded series of nights judged
against one stored reference profile is at most `alpha`, however many nights are run.

Two alarms share `alpha`, and the series alarms at the first of them (a union bound: no independence needed):

- **A sudden shift: tonight alone** (`night_share` of alpha, 0.7: `alpha_night`). Bonferroni over the nights with
  weights that sum to 1: night t alarms when tonight's p-value is at most `alpha_night · w_t`, with `w_t` flat,
  (1 − TAIL)/H, over the first H = `horizon` nights (365: within the first year it is Bonferroni over 365 nights
  at a share of alpha) and TAIL·H/(t(t − 1)) beyond, summing to TAIL. Tonight's p-value is the gate's own: the
  two-sample KS p-value of each numeric feature, Bonferroni over them. It is uniform over the draw of the
  reference and tonight's sample, which is all a union bound over nights needs, so the nights' dependence through
  the one stored profile costs nothing here.
- **A shift that builds up: the e-process** (the rest, `alpha − delta − alpha_night`). Each night gives a p-value
  that is valid *given the stored profile* (not only on average over profiles), which is converted into an
  e-value and folded into a running e-process; it alarms when it reaches 1/(alpha − delta − alpha_night)
  (Ville's inequality; 200 at alpha 0.05). Its share is small because it costs little: it finds a shift held
  over several nights each too small for tonight alone, and a threshold 3× higher costs it about one night
  (benchmarks/drift_series_bench.py --night-share: 0.5 against 0.7, 0.2σ p90 6 against 5 nights).
  - *The profile's own sampling noise.* Judged against one fixed reference sample, the nights are dependent: an
    unlucky reference makes every night look shifted, so evidence multiplied over nights from the ordinary
    two-sample p-values — uniform only on average over references — would pile up. Here each numeric feature's
    KS distance is shrunk by the DKW–Massart bound on the reference ECDF's own error,
    `eps = sqrt(ln(2K/delta) / (2n))` (K features, n reference samples), which holds for every feature at once
    with probability ≥ 1 − delta over the reference. On that event, tonight's distance to the true reference
    distribution is at least `max(D − eps, 0)` (D: the least the sketches allow, `effect` in the feature table),
    and the one-sample Kolmogorov p-value of that distance with tonight's m samples is valid given the profile
    (the asymptotic Kolmogorov tail is conservative for every m, and for ties). Features: Bonferroni.
  - *E-values.* p → e with the mixture calibrator of Vovk & Wang (2021), e(p) = ∫₀¹ κ p^(κ−1) dκ =
    (1 − p + p ln p) / (p ln² p): an e-value for any super-uniform p, unbounded as p → 0, ½ at p = 1.
  - *The e-process.* `M_t = (M_{t−1} + w_t) · e_t`, `M_0 = 0`, `w_s = 1/(s(s+1))`: the sum over start nights s
    of `w_s ∏_{r=s..t} e_r`, a mixture of test supermartingales started on each night, whose weights sum to 1.
    So a shift that starts after a long healthy run is not buried under the evidence against it that the healthy
    nights piled up (a plain product, s = 1 alone, would be), and still P(sup_t M_t ≥ 1/a) ≤ a (Ville).
- **The effect floor.** Both judge a feature's distance as its KS distance less the DKW allowance, and a feature
  whose distance is below the gate's `min_effect` gives p = 1 (raising a p-value keeps it valid): a creep the
  night's own test calls no drift is no evidence over the nights either.
- **Guarantee.** If the nights' serving samples are draws from the reference's distribution (the null),
  P(the series ever alarms) ≤ alpha_night + delta + (alpha − delta − alpha_night) = alpha, for every number of
  nights. Categorical and MMD tests are reported tonight but do not enter the series (their reference noise is
  not bounded here).

References: Ramdas, Grünwald, Vovk & Shafer (2023), Game-theoretic statistics and safe anytime-valid inference,
Statistical Science 38(4); Vovk & Wang (2021), E-values: calibration, combination and applications, Annals of
Statistics 49(3); Shin, Ramdas & Rinaldo (2023), E-detectors (restart mixtures); Massart (1990), the tight DKW
constant.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from skewgate.common.documents import parse_json
from skewgate.common.errors import InputError
from skewgate.common.io import read_regular_file
from skewgate.common.mlflow_conventions import SERIES_TAG_PREFIX
from skewgate.common.verdict import Check, Verdict, derive_status
from skewgate.drift.stats import ks

CHECK = "series.anytime_valid"
# Tonight's drift decision: with a series it is reported (warn at most) and the series decides the night, or a
# test at alpha every night would fail about alpha of the healthy ones (12 a year at 5 %). Data-quality checks
# (missing values, features that could not be judged) keep their severity.
TONIGHT_DECISIONS = ("joint_drift",)
SCHEMA = "skewgate.drift-series"
VERSION = 2  # v2: the single-night alarm beside the e-process (a v1 state is read, and starts a new series)
METHOD = ("the first of two alarms sharing alpha: tonight's two-sample KS p-value (Bonferroni over numeric "
          "features) at most alpha_night·w_t, w_t flat over the horizon's nights (Bonferroni over nights); and an "
          "e-process: per night, Bonferroni over numeric features of one-sample KS p-values at max(D − eps, 0) "
          "(eps: DKW bound on the reference profile's own error), mixture calibrator e = (1 − p + p ln p)/(p ln² "
          "p), restarts mixed with weights 1/(s(s+1)), alarm at 1/(alpha − delta − alpha_night) (Ville); a "
          "feature whose D − eps is below the gate's effect floor is no evidence")
REFERENCE = ("Ramdas et al. 2023, Game-theoretic statistics and safe anytime-valid inference; "
             "Vovk & Wang 2021 calibrators")
TAIL = 0.1  # the single-night alarm's share of alpha_night spent after the horizon (decaying as 1/t²)
AlarmCause = Literal["night", "e-process"]
# tags on the champion that carry the state from night to night (the same fields as the JSON state)
TAG_PREFIX = SERIES_TAG_PREFIX
MAX_STATE_BYTES = 64 * 1024  # a state is a dozen numbers; an artifact an attacker could swap is read bounded


@dataclass(frozen=True, kw_only=True)
class SeriesOptions:
    alpha: float = 0.05  # P(any false alarm over the whole series) ≤ alpha
    reference_share: float = 0.2  # delta = share · alpha is spent on the reference profile's own error
    night_share: float = 0.7  # alpha_night = share · alpha is the single-night alarm's (a sudden shift)
    horizon: int = 365  # nights over which the single-night alarm spreads 1 − TAIL of alpha_night evenly

    def __post_init__(self) -> None:
        if (not 0 < self.alpha < 1 or not 0 < self.reference_share < 1 or not 0 < self.night_share < 1
                or self.reference_share + self.night_share >= 1 or self.horizon < 1):
            raise InputError("series options", expected="0 < alpha < 1, shares in (0, 1) summing below 1, "
                             "horizon ≥ 1", found=f"alpha {self.alpha}, reference_share {self.reference_share}, "
                             f"night_share {self.night_share}, horizon {self.horizon}")

    @property
    def delta(self) -> float:
        return self.alpha * self.reference_share

    @property
    def alpha_night(self) -> float:
        return self.alpha * self.night_share

    @property
    def threshold(self) -> float:
        """The e-process alarms at or above this: 1/(alpha − delta − alpha_night)."""
        return 1.0 / (self.alpha - self.delta - self.alpha_night)

    def night_level(self, night: int) -> float:
        """Night `night` (1-based) alone alarms when its p-value is at most this: alpha_night · w_t, w_t =
        (1 − TAIL)/H up to the horizon H, TAIL·H/(t(t − 1)) beyond (Σ w_t = 1)."""
        h = self.horizon
        share = (1.0 - TAIL) / h if night <= h else TAIL * h / (night * (night - 1.0))
        return self.alpha_night * share


@dataclass(frozen=True, kw_only=True)
class SeriesState:
    """What is carried from one night to the next; a new profile (another `profile`) starts a new series."""

    profile: str  # the reference profile's digest: the series is against this one
    nights: int = 0
    evalue: float = 0.0  # M_t (0 before the first night)
    alarmed_night: int | None = None  # the first night the series alarmed (the alarm stays)
    alarmed_by: AlarmCause | None = None  # which alarm: that night alone, or the e-process
    last_evalue: float | None = None  # tonight's e-value
    last_pvalue: float | None = None  # tonight's p-value given the profile (the e-process')
    last_night_pvalue: float | None = None  # tonight's two-sample p-value (the single-night alarm's)
    last_night_level: float | None = None  # ... and the level it was judged at
    alpha: float = SeriesOptions.alpha
    reference_share: float = SeriesOptions.reference_share
    night_share: float = SeriesOptions.night_share
    horizon: int = SeriesOptions.horizon
    started: str = ""  # the date of the first night
    last_date: str = ""
    # The snapshot the last night judged, and the series as it stood before that night: the same snapshot judged
    # again (a retried run) replaces that night instead of counting it twice.
    last_snapshot: str = ""
    prior_evalue: float = 0.0
    prior_alarmed_night: int | None = None
    prior_alarmed_by: AlarmCause | None = None

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "version": VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "series state") -> SeriesState:
        if data.get("schema") != SCHEMA or data.get("version") not in (1, VERSION):
            raise InputError(where, expected=f"{SCHEMA} v1 or v{VERSION}",
                             found=f"{data.get('schema')} v{data.get('version')}")
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        if data["version"] == 1:  # e-process alone: its options are none of today's, so `advance` starts anew
            fields.update(night_share=0.0, horizon=0)
        try:
            return cls(**fields)
        except TypeError as err:
            raise InputError(where, expected="a series state", found=str(err)) from err

    def tags(self) -> dict[str, str]:
        """The state as registry tags (strings); `from_tags` reads them back."""
        return {TAG_PREFIX + "state": json.dumps(self.to_json(), sort_keys=True)}

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> SeriesState | None:
        text = tags.get(TAG_PREFIX + "state")
        where = TAG_PREFIX + "state"
        return None if not text else cls.from_json(parse_json(text, source=where, expected="a series state"),
                                                   where=where)


def load_state(path: str | Path) -> SeriesState | None:
    """The state in `path`; None (a new series) when there is no such file."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:  # an empty KFP artifact file: no state either
        return None
    data = parse_json(read_regular_file(path, limit=MAX_STATE_BYTES, expected="a series state (JSON)"),
                      source=str(path), expected="a series state (JSON)")
    if not isinstance(data, dict):
        raise InputError(path, expected="a series state (a JSON object)", found=type(data).__name__)
    return SeriesState.from_json(data, where=str(path))


def save_state(state: SeriesState, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n")
    return path


def calibrate(p: float) -> float:
    """Vovk & Wang's mixture calibrator: e = ∫₀¹ κ p^(κ−1) dκ = (1 − p + p ln p) / (p ln² p)."""
    p = min(max(p, 1e-300), 1.0)
    if p > 0.9999:
        return 0.5  # the limit at p = 1 (the closed form loses its digits there)
    log = math.log(p)
    return (1.0 - p + p * log) / (p * log * log)


def reference_eps(n: int, *, features: int, delta: float) -> float:
    """DKW–Massart: with probability ≥ 1 − delta, every one of `features` reference ECDFs of n samples is within
    this of its distribution."""
    return math.sqrt(math.log(2.0 * max(features, 1) / delta) / (2.0 * max(n, 1)))


def feature_pvalue(d: float, *, reference_n: int, current_n: int, features: int, delta: float,
                   min_effect: float = 0.0) -> float:
    """The p-value, given the profile, of a KS distance `d` between tonight's `current_n` samples and a
    reference ECDF of `reference_n`: one-sample Kolmogorov at max(d − eps, 0), and 1 where that distance (the KS
    distance less the DKW allowance) is below the gate's effect floor `min_effect`. Raising a p-value to 1 keeps
    it valid; a creep smaller than the floor is then no evidence, as it is no drift to the night's own test."""
    if not math.isfinite(d) or current_n == 0:
        return 1.0
    judged = max(d - reference_eps(reference_n, features=features, delta=delta), 0.0)
    if judged < min_effect:
        return 1.0
    return ks.kolmogorov_sf(judged * math.sqrt(current_n))


@dataclass(frozen=True)
class NightEvidence:
    """Tonight's two p-values, each Bonferroni over the numeric features that could be tested (1 when none is)."""

    given_profile: float  # one-sample at max(D − eps, 0): valid given the stored profile (the e-process')
    two_sample: float  # the gate's two-sample p-values: valid over the reference's draw (the single-night alarm's)
    features: int


def night_evidence(rows: Iterable[Mapping[str, Any]], *, delta: float, min_effect: float = 0.0,
                   profiles: int = 1) -> NightEvidence:
    """Tonight's evidence from the drift gate's feature table: per numeric feature its `effect` (the least KS D
    the sketches allow), its two-sample `pvalue` and the sample sizes. A feature whose distance less the DKW
    allowance is below `min_effect` gives p = 1 to both. `profiles`: the profiles the series' nights are judged
    against (a periodic profile's periods), all of whose ECDFs the DKW event must cover."""
    tested = [r for r in rows if r.get("test") == "ks" and r.get("statistic") is not None
              and r.get("pvalue") is not None and r.get("reference_n") and r.get("current_n")
              and "untestable" not in r]
    if not tested:
        return NightEvidence(1.0, 1.0, 0)
    k = len(tested)
    ecdfs = k * max(profiles, 1)
    given, two_sample = 1.0, 1.0
    for r in tested:
        d, n, m = float(r["effect"]), int(r["reference_n"]), int(r["current_n"])
        if max(d - reference_eps(n, features=ecdfs, delta=delta), 0.0) < min_effect:
            continue  # below the effect floor: no evidence for either alarm
        given = min(given, feature_pvalue(d, reference_n=n, current_n=m, features=ecdfs, delta=delta))
        two_sample = min(two_sample, float(r["pvalue"]))
    return NightEvidence(min(1.0, k * given), min(1.0, k * two_sample), k)


def weight(night: int) -> float:
    """The weight of the series restarted on `night` (1-based): 1/(s(s+1)), summing to 1."""
    return 1.0 / (night * (night + 1))


def _options_of(state: SeriesState) -> tuple[float, float, float, int]:
    return state.alpha, state.reference_share, state.night_share, state.horizon


def advance(state: SeriesState | None, evidence: NightEvidence, *, profile: str,
            options: SeriesOptions = SeriesOptions(), date: str = "", snapshot: str = "") -> SeriesState:
    """Tonight folded into the series against `profile`; a missing state, or one for another profile (or other
    options), starts a new series. The `snapshot` (its digest) the last night already judged replaces that
    night: a retry is the same night, not another piece of evidence."""
    wanted = (options.alpha, options.reference_share, options.night_share, options.horizon)
    if state is None or state.profile != profile or _options_of(state) != wanted:
        state = SeriesState(profile=profile, alpha=options.alpha, reference_share=options.reference_share,
                            night_share=options.night_share, horizon=options.horizon, started=date)
    elif snapshot and snapshot == state.last_snapshot and state.nights > 0:
        state = replace(state, nights=state.nights - 1, evalue=state.prior_evalue,
                        alarmed_night=state.prior_alarmed_night, alarmed_by=state.prior_alarmed_by)
    night = state.nights + 1
    e = calibrate(evidence.given_profile)
    evalue = (state.evalue + weight(night)) * e
    level = options.night_level(night)
    alarmed, by = state.alarmed_night, state.alarmed_by
    if alarmed is None and (evidence.two_sample <= level or evalue >= options.threshold):
        alarmed, by = night, ("night" if evidence.two_sample <= level else "e-process")
    return replace(state, nights=night, evalue=evalue, alarmed_night=alarmed, alarmed_by=by, last_evalue=e,
                   last_pvalue=evidence.given_profile, last_night_pvalue=evidence.two_sample,
                   last_night_level=level, last_date=date, last_snapshot=snapshot, prior_evalue=state.evalue,
                   prior_alarmed_night=state.alarmed_night, prior_alarmed_by=state.alarmed_by)


ALARMS: dict[str, str] = {"night": "one night's p-value below its share of alpha",
                          "e-process": "the e-process reached its threshold"}


def check(state: SeriesState, options: SeriesOptions = SeriesOptions()) -> Check:
    """The series' alarm; its value and limit are the e-process' (the single-night alarm's are in the detail)."""
    alarmed = state.alarmed_night is not None
    what = (f"alarm since night {state.alarmed_night} of {state.nights} ({ALARMS[state.alarmed_by or 'e-process']})"
            if alarmed else f"no alarm over {state.nights} night(s)")
    tonight = ("" if state.last_night_pvalue is None else
               f"; tonight's two-sample p {state.last_night_pvalue:.3g} (alarm at ≤ {state.last_night_level:.3g})")
    return Check(CHECK, passed=not alarmed, value=state.evalue, limit=options.threshold,
                 detail=f"over the series against profile {state.profile[:12]}: running e-value "
                        f"{state.evalue:.3g} (alarm at {options.threshold:.3g}){tonight}; {what}; P(any false "
                        f"alarm over every night) ≤ {options.alpha}")


def details(state: SeriesState, options: SeriesOptions = SeriesOptions(), *, features: int) -> dict[str, Any]:
    return {"nights": state.nights, "evalue": state.evalue, "threshold": options.threshold,
            "alarmed_night": state.alarmed_night, "alarmed_by": state.alarmed_by,
            "tonight_pvalue": state.last_pvalue, "tonight_evalue": state.last_evalue,
            "tonight_night_pvalue": state.last_night_pvalue, "tonight_night_level": state.last_night_level,
            "features": features, "alpha": options.alpha, "delta": options.delta,
            "alpha_night": options.alpha_night, "horizon": options.horizon, "profile": state.profile,
            "started": state.started, "method": METHOD, "reference": REFERENCE}


def judge(verdict: Verdict, rows: Iterable[Mapping[str, Any]], state: SeriesState | None, *, profile: str,
          options: SeriesOptions = SeriesOptions(), date: str = "", min_effect: float = 0.0,
          profiles: int = 1) -> tuple[Verdict, SeriesState]:
    """The verdict with "over the series" beside "tonight", and the state to keep: the series decides the night
    (`series.anytime_valid`, a `fail` check: the alarm whose false-alarm probability over all nights is bounded);
    tonight's drift decision (`TONIGHT_DECISIONS`) is reported as a warning; data-quality checks keep their
    severity. `rows`: the whole feature table (the verdict's details keep only the first 200); `min_effect`: the
    gate's effect floor, below which no distance is evidence; `profiles`: the periods of a periodic profile. The
    night is known by the digest of the data it judged (the verdict's subject): judging the same snapshot again
    replaces the night."""
    evidence = night_evidence(rows, delta=options.delta, min_effect=min_effect, profiles=profiles)
    snapshot = str(verdict.subject.data.get("current", "")) if verdict.subject else ""
    state = advance(state, evidence, profile=profile, options=options, date=date, snapshot=snapshot)
    tonight = tuple(replace(c, severity="warn", detail=f"{c.detail} (reported; the series decides the night)")
                    if c.name in TONIGHT_DECISIONS else c for c in verdict.checks)
    checks = (*tonight, check(state, options))
    status, message = derive_status(checks)
    return replace(verdict, checks=checks, status=status, message=message,
                   details={**verdict.details, "series": details(state, options, features=evidence.features)}), state
