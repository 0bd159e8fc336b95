"""A release policy: which gates a release needs, and the loosest setting each may have been judged with.

Every verdict says the settings it was judged with (`Verdict.settings`, inside the signed predicate). A pass
judged under a loosened tolerance is still a pass, so promote and verify judge the settings too: a policy bounds
them per step, and a verdict judged more loosely is refused naming the setting. This is in-toto's layout (and
SLSA's verification policy) applied to gate results: the verifier, not the producer, says what counts.

A policy file (`--policy FILE`, JSON or YAML) holds, all optional:

    schema_version: 1
    required: [export, calibrate, drift, parity, probe, compare]  # default: every release-gate step
    allow_warn: false
    settings:                     # per step: setting → one rule; merged over the defaults below
      parity:
        min_layer_sqnr_db: {at_least: 25}
        tolerances: {any: true}   # lift a default bound
      compare:
        thresholds.accuracy.max_regression: {at_most: 0.01}
    checks:                       # per step: checks its verdict must hold, passed (`*` globs)
      parity: ["stream.*"]
    keys:                         # trusted keys (`--trusted-key`) this policy no longer or not yet trusts
      revoked: [KEYID]            # `skewgate keys` key ids (SHA-256 of the raw public key)
      valid: {KEYID: {not_before: 2026-01-01T00:00:00Z, not_after: 2027-01-01T00:00:00Z}}

Rules: `at_most` (a number no larger: tolerances, budgets, drops, latency), `at_least` (a number no smaller:
alphas, SQNR floors, sample counts), `equals` (exactly this value: an override that must stay unset), `one_of`,
and `any` (no bound). A setting is a dotted path into the verdict's settings. `null` (a limit not applied) is
never within `at_most`/`at_least`. With no file, the policy is the release gate's defaults (`DEFAULT_BOUNDS`: each
step's own defaults, so a pipeline run with the documented defaults passes and any loosening is refused).

Default deny: every setting a verdict records is judged by a rule. `DEFAULT_BOUNDS` has one for every option of
every step (those that only name output files are not recorded at all); a setting no rule names — an option a
newer step added, a field a hand-made verdict carries — is refused, and so is a verdict that records none. The file
is read by `common.documents` (no YAML anchors or aliases, no duplicate keys, bounded nesting and integers), and one
step named twice (`calibrate` and `calibrate-int8`) is an error, never a silent overwrite.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from skewgate.common.errors import InputError
from skewgate.common.steps import DEFAULT_ALIAS, RELEASE_GATE_STEPS, resolve_steps
from skewgate.common.verdict import Verdict

log = logging.getLogger(__name__)
Rule = Literal["at_most", "at_least", "equals", "one_of", "any"]
RULES: tuple[str, ...] = get_args(Rule)
POLICY_SCHEMA_VERSION = 1
MAX_POLICY_BYTES = 256 * 1024
DEFAULT_SOURCE = "the release gate's defaults"
# What a release of a stateful model (one served step by step: `--stream-onnx`, `--stream`) needs besides: stream
# mode in parity (STEP driven step by step equals FULL, uses its state, resets) and the stateful Triton probe.
STREAM_CHECKS: Mapping[str, tuple[str, ...]] = {
    "parity": ("stream.matches_batch", "stream.state_used", "stream.reset"), "probe": ("stream.*",)}


@dataclass(frozen=True)
class Bound:
    """One rule over one setting of one step's verdict."""

    step: str
    setting: str  # a dotted path into `Verdict.settings`
    rule: Rule
    value: Any = None

    def problem(self, settings: Mapping[str, Any]) -> str:
        """Why `settings` break this bound ("" when they keep it)."""
        if self.rule == "any":
            return ""
        found, value = _lookup(settings, self.setting)
        if not found:
            return f"{self.setting} is not among the settings it was judged with"
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if self.rule == "at_most" and not (number and value <= self.value):
            return f"{self.setting} = {_show(value)}, the policy accepts at most {_show(self.value)}"
        if self.rule == "at_least" and not (number and value >= self.value):
            return f"{self.setting} = {_show(value)}, the policy accepts at least {_show(self.value)}"
        if self.rule == "equals" and value != self.value:
            return f"{self.setting} = {_show(value)}, the policy accepts only {_show(self.value)}"
        if self.rule == "one_of" and value not in self.value:
            return f"{self.setting} = {_show(value)}, the policy accepts one of {_show(self.value)}"
        return ""

    def describe(self) -> dict[str, Any]:
        return {"step": self.step, "setting": self.setting, "rule": self.rule, "value": self.value}


def _bounds(step: str, rules: Mapping[str, tuple[Rule, Any]]) -> tuple[Bound, ...]:
    return tuple(Bound(step, setting, rule, value) for setting, (rule, value) in rules.items())


ANY: tuple[Rule, Any] = ("any", True)  # the setting says what was judged (a layout, a server, a file), not how
# strictly: any value is judged as strictly as the default

# Every setting each step's verdict records, with the loosest value the release gate accepts (tests/common/
# test_policy.py holds the table to the steps' options: every option has a rule, each rule sits exactly at its
# option's default, and a loosened value of each is refused). Default deny: a setting no rule names is refused,
# so an option added to a step is refused until a rule here (or in a policy file) judges it. Direction is per
# setting: a larger tolerance, budget or p99 loosens; a smaller alpha, SQNR floor or sample count loosens;
# compare's wider interval (higher confidence) loosens, since it blocks only when the whole interval shows a
# regression; Bonferroni is looser than Benjamini–Hochberg; a seed other than the default is a second draw.
# how calibrate and parity judge an INT8 (or FP16) output: one criterion, one bound each; the task and class
# axis describe the model (a wrong one is the user's statement, as `--ids` is in drift)
INT8_JUDGEMENT: dict[str, Any] = {"min_top1_agreement": ("at_least", 0.99), "min_cosine_similarity": ("at_least", 0.99),
                                  "max_regression_error": ("at_most", 0.05), "task": ANY, "class_axis": ANY,
                                  "output_tasks": ANY}
# compare's metrics that are shares (higher is better): half a point of any of them is the largest drop allowed
SHARE_METRICS = ("accuracy", "macro_f1", "pixel_accuracy", "miou", "nn_accuracy", "recall_at_k")
DEFAULT_BOUNDS: tuple[Bound, ...] = (
    *_bounds("export", {"max_samples": ("at_least", 64), "tolerances": ("equals", []),
                        "allow_pickle": ("equals", False), "states": ANY}),
    *_bounds("calibrate", {"max_accuracy_drop": ("at_most", 0.01), "max_fallback_layers": ("at_most", 8),
                           **INT8_JUDGEMENT,
                           "min_calibration_samples": ("at_least", 32), "max_uncovered": ("at_most", 0.01),
                           "outlier_ratio": ("at_most", 10.0), "min_int8_mac_share": ("at_least", 0.8),
                           # how the INT8 file is made, which the budget then judges
                           "method": ANY, "per_channel": ANY, "equalize": ANY, "batch_size": ANY}),
    *_bounds("drift", {"alpha_ks": ("at_least", 0.05), "alpha_mmd": ("at_least", 0.05),
                       "correction": ("equals", "bh"), "min_effect": ("at_most", 0.05),
                       "nan_tolerance": ("at_most", 0.05), "permutations": ("at_least", 200),
                       # fewer rows or features behind a statistic: a coarser test
                       "exact_max_rows": ("at_least", 2000), "permutation_max_rows": ("at_least", 25_000),
                       "mmd_max_rows": ("at_least", 131_072), "sample_rows": ("at_least", 8192),
                       "rff_features": ("at_least", 510), "exact_rows": ("at_least", 131_072),
                       "sketch_capacity": ("at_least", 4096), "sketch": ("at_least", 4096),
                       "max_categories": ("at_least", 1000), "id_selection_share": ("equals", 0.25),
                       "min_expected": ("equals", 5.0), "seed": ("equals", 0),
                       # memory; the data's layout (a timestamp column is not a feature; a periodic profile is
                       # saved for the nights, while the release check judges the whole reference)
                       "batch_rows": ANY, "feature_axes": ANY, "ids": ANY, "timestamp": ANY, "period": ANY}),
    *_bounds("parity", {"tolerances": ("equals", {}), "layer_tolerance": ("equals", None),
                        "min_layer_sqnr_db": ("at_least", 20.0), "min_output_sqnr_db": ("at_least", 15.0),
                        **INT8_JUDGEMENT, "max_kl_divergence": ("at_most", 0.05),
                        "max_samples": ("at_least", 256), "seed": ("equals", 0),
                        # what is compared (the pipeline runs layerwise; stream mode adds checks a stateful
                        # release requires), on what and where; deadlines bound waiting, not judging
                        # a deployment computing in FP16 or INT8 is judged by agreement alone: a policy says so
                        "triton_serves": ("equals", "fp32"),
                        "layerwise": ANY, "batch_size": ANY, "triton_protocol": ANY, "triton_deadline_s": ANY,
                        "fp16_cuda": ANY, "stream_onnx": ANY, "states": ANY, "initial_state": ANY}),
    *_bounds("probe", {"tolerances": ("equals", {}), "max_p99_ms": ("at_most", 1000.0), **INT8_JUDGEMENT,
                       "max_samples": ("at_least", 16), "requests_per_level": ("at_least", 40),
                       "max_sequences": ("at_least", 4),
                       # the server, the model version and how they are reached; what a stateful model keeps
                       "protocol": ANY, "version": ANY, "headers": ANY, "tls": ANY, "ca_certificate": ANY,
                       "deadline_s": ANY, "load_model": ANY, "concurrency_levels": ANY, "stream": ANY,
                       "states": ANY, "initial_state": ANY, "first_correlation_id": ANY}),
    *_bounds("compare", {**{f"thresholds.{share}.max_regression": ("at_most", 0.005) for share in SHARE_METRICS},
                         "thresholds.mae.max_relative_regression": ("at_most", 0.02),
                         "thresholds.rmse.max_relative_regression": ("at_most", 0.02),
                         # unset by default: a floor or a second limit only adds a requirement (the smaller limit
                         # applies)
                         **{f"thresholds.{share}.{extra}": ANY for share in SHARE_METRICS
                            for extra in ("floor", "max_relative_regression")},
                         "thresholds.mae.floor": ANY, "thresholds.mae.max_regression": ANY,
                         "thresholds.rmse.floor": ANY, "thresholds.rmse.max_regression": ANY,
                         "confidence": ("at_most", 0.95), "resamples": ("at_least", 1000), "seed": ("equals", 0),
                         "alias": ("equals", DEFAULT_ALIAS),  # promote and verify: the alias they judge
                         "output": ("equals", None), "min_slice_size": ("at_most", 30),
                         "max_slices": ("at_least", 50), "max_churn": ANY,  # None: not gated; a number gates
                         # the thresholds in force are judged above; the task and arrays describe the data
                         "threshold_specs": ANY, "task": ANY, "slice_key": ANY, "labels_key": ANY}),
    *_bounds("preprocess", {"tolerance": ("equals", None), "array": ANY}),
    *_bounds("estimate", {"max_drop": ("at_most", 0.02), "confidence": ("at_most", 0.95),
                          "resamples": ("at_least", 200), "seed": ("equals", 0),
                          "max_extrapolated": ("at_most", 0.05), "max_extrapolated_judged": ("at_most", 0.25),
                          "output": ("equals", None),
                          # what is estimated and from which data; folds and batches shape the report, not the
                          # judgement
                          "metric": ANY, "labels_key": ANY, "features": ANY, "folds": ANY, "batch_rows": ANY}),
)


@dataclass(frozen=True, kw_only=True)
class GatePolicy:
    """What a release needs from the gates' verdicts (trust — keys, the pipeline run — is promote's own)."""

    required: tuple[str, ...] = RELEASE_GATE_STEPS
    allow_warn: bool = False
    bounds: tuple[Bound, ...] = DEFAULT_BOUNDS
    checks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # step → check names (globs) it must hold
    source: str = DEFAULT_SOURCE  # the policy file, or the defaults
    revoked_keys: frozenset[str] = frozenset()  # key ids never trusted, whatever `--trusted-key` says
    key_windows: Mapping[str, tuple[datetime | None, datetime | None]] = field(default_factory=dict)

    def problems(self, verdict: Verdict) -> list[str]:
        """Why `verdict` does not meet this policy's bounds and required checks for its step (empty: it does).
        Default deny: a verdict that does not say its settings, and a setting no rule names, are refused."""
        bounds = [b for b in self.bounds if b.step == verdict.step]
        problems = []
        if not verdict.settings:
            problems.append(f"the verdict does not say the settings it was judged with (schema "
                            f"{verdict.schema_version}), so the policy ({self.source}) cannot judge them")
        else:
            problems += [f"judged with {p}" for p in (b.problem(verdict.settings) for b in bounds) if p]
            named = {b.setting for b in bounds}
            problems += [f"judged with {setting} = {_show(value)}, which no rule of the policy ({self.source}) "
                         f"names: a {verdict.step} setting is judged only by a rule (`settings.{verdict.step}."
                         f"{setting}`)" for setting, value in unnamed_settings(verdict.settings, named)]
        for pattern in self.checks.get(verdict.step, ()):
            held = [c for c in verdict.checks if fnmatch.fnmatchcase(c.name, pattern)]
            if not held:
                problems.append(f"no check {pattern!r}, which the policy ({self.source}) requires")
            problems += [f"check {c.name} failed, which the policy requires" for c in held if not c.passed]
        return problems

    def trusted(self, keys: Mapping[str, Any], *, now: datetime | None = None) -> dict[str, Any]:
        """The trusted `keys` (key id → public key) this policy still trusts at `now`; each other one (revoked, or
        outside its validity window) is named in a warning, and an `InputError` says why when keys were given and
        none is left (promote and verify cannot evaluate on no key)."""
        now = now or datetime.now(UTC)
        kept, dropped = {}, []
        for keyid, key in keys.items():
            not_before, not_after = self.key_windows.get(keyid, (None, None))
            if keyid in self.revoked_keys:
                dropped.append(f"key {keyid[:16]}… is revoked by the policy ({self.source})")
            elif (not_before and now < not_before) or (not_after and now > not_after):
                dropped.append(f"key {keyid[:16]}… is valid from {not_before or 'any time'} to "
                               f"{not_after or 'any time'} by the policy ({self.source}), not at "
                               f"{now:%Y-%m-%dT%H:%M:%SZ}")
            else:
                kept[keyid] = key
        if dropped and not kept:
            raise InputError("--trusted-key", expected="a key the policy trusts", found="; ".join(dropped))
        for reason in dropped:  # its signatures count for nothing now; the decision records the policy
            log.warning("%s", reason)
        return kept

    def promoting(self, alias: str) -> GatePolicy:
        """This policy for a promotion to (or a check of) `alias`: compare must have judged against the version that
        very alias holds, whatever the file says of `compare.alias`."""
        bounds = [b for b in self.bounds if (b.step, b.setting) != ("compare", "alias")]
        return replace(self, bounds=(*bounds, Bound("compare", "alias", "equals", alias)))

    def requiring(self, checks: Mapping[str, Sequence[str]]) -> GatePolicy:
        """This policy, with `checks` (step → check names or globs) required besides its own."""
        merged = {step: tuple(dict.fromkeys([*self.checks.get(step, ()), *checks.get(step, ())]))
                  for step in {*self.checks, *checks}}
        return replace(self, checks=merged)

    def describe(self) -> dict[str, Any]:
        """The policy as signed into promote's decision (verify reads `required` and `allow_warn` back)."""
        return {"required": list(self.required), "allow_warn": self.allow_warn, "source": self.source,
                "bounds": [b.describe() for b in self.bounds], "checks": {k: list(v) for k, v in self.checks.items()},
                "revoked_keys": sorted(self.revoked_keys),
                "key_windows": {k: [w.isoformat() if w else None for w in v] for k, v in self.key_windows.items()}}


def load_policy(path: str | Path, *, required: Sequence[str] = RELEASE_GATE_STEPS,
                allow_warn: bool = False) -> GatePolicy:
    """The policy in `path` (JSON or YAML), over the defaults: its `settings` rules replace the default rule of
    the settings they name; `required` and `allow_warn` (the caller's, when the file does not name them). Anything
    malformed is an `InputError` naming the file and the field."""
    from skewgate.common.documents import parse_yaml
    from skewgate.common.io import read_regular_file

    path = Path(path)
    expected = "a policy file (JSON or YAML)"
    document = parse_yaml(read_regular_file(path, limit=MAX_POLICY_BYTES, expected=expected), source=str(path),
                          expected=expected)
    return parse_policy(document, source=str(path), required=required, allow_warn=allow_warn)


def parse_policy(document: Any, *, source: str, required: Sequence[str] = RELEASE_GATE_STEPS,
                 allow_warn: bool = False) -> GatePolicy:
    """`load_policy` over an already parsed document; `source` names it in errors."""
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise InputError(source, expected="a policy: a mapping", found=type(document).__name__)
    unknown = sorted(set(map(str, document)) - {"schema_version", "required", "allow_warn", "settings", "checks",
                                                "keys"})
    if unknown:
        raise InputError(source, field=unknown[0], expected="schema_version, required, allow_warn, settings, checks, "
                         "keys", found=f"unknown field(s) {unknown}")
    version = document.get("schema_version", POLICY_SCHEMA_VERSION)
    if version != POLICY_SCHEMA_VERSION or isinstance(version, bool):
        raise InputError(source, field="schema_version", expected=str(POLICY_SCHEMA_VERSION), found=repr(version))
    if "required" in document:
        steps = document["required"]
        if not isinstance(steps, list) or not steps or not all(isinstance(s, str) for s in steps):
            raise InputError(source, field="required", expected="a non-empty list of step names", found=repr(steps))
        required = resolve_steps(steps, source=f"{source}: required")
    if "allow_warn" in document:
        if not isinstance(document["allow_warn"], bool):
            raise InputError(source, field="allow_warn", expected="true or false",
                             found=repr(document["allow_warn"]))
        allow_warn = document["allow_warn"]
    rules = {(b.step, b.setting): b for b in DEFAULT_BOUNDS}
    for step, settings in _steps_mapping(document.get("settings", {}), source=source, key="settings").items():
        if not isinstance(settings, dict):
            raise InputError(source, field=f"settings.{step}", expected="a mapping of setting → rule",
                             found=type(settings).__name__)
        for setting, rule in settings.items():
            rules[(step, str(setting))] = _bound(step, str(setting), rule, source=source)
    checks: dict[str, tuple[str, ...]] = {}
    for step, names in _steps_mapping(document.get("checks", {}), source=source, key="checks").items():
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise InputError(source, field=f"checks.{step}", expected="a non-empty list of check names",
                             found=repr(names))
        checks[step] = tuple(names)
    revoked, windows = _keys(document.get("keys", {}), source=source)
    return GatePolicy(required=tuple(required), allow_warn=allow_warn, bounds=tuple(rules.values()), checks=checks,
                      source=source, revoked_keys=revoked, key_windows=windows)


_KEYID = re.compile(r"[0-9a-f]{64}")


def _keys(value: Any, *, source: str) -> tuple[frozenset[str], dict[str, tuple[datetime | None, datetime | None]]]:
    """The policy's `keys`: revoked key ids, and validity windows by key id."""
    if not isinstance(value, dict) or set(map(str, value)) - {"revoked", "valid"}:
        raise InputError(source, field="keys", expected="a mapping with `revoked` and/or `valid`",
                         found=repr(value)[:80])
    revoked = value.get("revoked", [])
    if not isinstance(revoked, list) or not all(isinstance(k, str) and _KEYID.fullmatch(k) for k in revoked):
        raise InputError(source, field="keys.revoked", expected="a list of key ids (64 lowercase hex digits)",
                         found=repr(revoked)[:80])
    windows: dict[str, tuple[datetime | None, datetime | None]] = {}
    valid = value.get("valid", {})
    if not isinstance(valid, dict):
        raise InputError(source, field="keys.valid", expected="a mapping of key id → {not_before, not_after}",
                         found=type(valid).__name__)
    for keyid, window in valid.items():
        where = f"keys.valid.{keyid}"
        if not _KEYID.fullmatch(str(keyid)) or not isinstance(window, dict) or not window or \
                set(map(str, window)) - {"not_before", "not_after"}:
            raise InputError(source, field=where, expected="a key id → {not_before: TIME, not_after: TIME}",
                             found=repr(window)[:80])
        windows[str(keyid)] = (_instant(window.get("not_before"), source, f"{where}.not_before"),
                               _instant(window.get("not_after"), source, f"{where}.not_after"))
    return frozenset(revoked), windows


def _instant(value: Any, source: str, where: str) -> datetime | None:
    """An ISO 8601 time with its offset (YAML may have read it as a datetime already); None when not given."""
    if value is None:
        return None
    try:
        instant = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    except ValueError as err:
        raise InputError(source, field=where, expected="an ISO 8601 time such as 2027-01-01T00:00:00Z",
                         found=repr(value)) from err
    if instant.tzinfo is None:
        raise InputError(source, field=where, expected="a time with its offset (Z or +HH:MM)", found=repr(value))
    return instant


def write_policy(text: str, folder: Path) -> str:
    """A policy given inline (a KFP parameter: JSON or YAML text) as the file `--policy` takes; "" (the
    release gate's defaults) when the text is blank."""
    if not text.strip():
        return ""
    path = folder / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _steps_mapping(value: Any, *, source: str, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(source, field=key, expected="a mapping of step → …", found=type(value).__name__)
    resolved: dict[str, Any] = {}
    spelt: dict[str, str] = {}
    for name, item in value.items():
        (step,) = resolve_steps([str(name)], source=f"{source}: {key}")
        if step in resolved:  # `calibrate` and `calibrate-int8`: one would silently overwrite the other
            raise InputError(source, field=f"{key}.{name}", expected=f"one entry for the step {step!r}",
                             found=f"both {spelt[step]!r} and {name!r}")
        resolved[step], spelt[step] = item, str(name)
    return resolved


def _bound(step: str, setting: str, rule: Any, *, source: str) -> Bound:
    where = f"settings.{step}.{setting}"
    if not isinstance(rule, dict) or len(rule) != 1 or next(iter(rule)) not in RULES:
        raise InputError(source, field=where, expected=f"one rule: {{{' | '.join(RULES)}: value}}",
                         found=json.dumps(rule, default=str)[:80])
    name, value = next(iter(rule.items()))
    numeric = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if name in ("at_most", "at_least") and not numeric:
        raise InputError(source, field=f"{where}.{name}", expected="a finite number", found=repr(value))
    if name == "one_of" and not isinstance(value, list):
        raise InputError(source, field=f"{where}.one_of", expected="a list of values", found=repr(value))
    if name == "any" and value is not True:
        raise InputError(source, field=f"{where}.any", expected="true", found=repr(value))
    return Bound(step, setting, name, value)


def unnamed_settings(settings: Mapping[str, Any], named: set[str], prefix: str = "") -> list[tuple[str, Any]]:
    """The settings (dotted paths, with their values) that no rule in `named` judges: a rule names a setting, or a
    mapping of them as a whole (`tolerances`); a mapping whose parts some rule names is looked into."""
    found = []
    for key, value in settings.items():
        path = f"{prefix}{key}"
        if path in named:
            continue
        if isinstance(value, Mapping) and value and any(n.startswith(path + ".") for n in named):
            found += unnamed_settings(value, named, prefix=path + ".")
        else:
            found.append((path, value))
    return found


def _lookup(settings: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    """The value at a dotted `path` (a whole key first: option names hold no dots, mapping keys may)."""
    if path in settings:
        return True, settings[path]
    head, dot, rest = path.partition(".")
    if dot and head in settings and isinstance(settings[head], Mapping):
        return _lookup(settings[head], rest)
    return False, None


def _show(value: Any) -> str:
    return json.dumps(value, default=str)
