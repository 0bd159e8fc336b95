"""Re-check a champion from the registry alone: what a deployment runs before it loads the model.

Resolve the alias to a version; read the version's `MLmodel` and find the file its flavours load (the `onnx`
flavour's `data:`, which the `python_function` flavour must load too, through `mlflow.onnx`); that very file must
have the SHA-256 of the version's evidence tag, and the folder may hold no other model file (`*.onnx`, `*.data`)
and no external data, which no gated digest covers. Then open promote's signed decision: it must be by a trusted
key, say `pass`, and name this digest, this model name, this version and the alias asked about, under a policy that
required at least the steps asked for; then every required step's stored verdict must be signed by a trusted key,
about this digest, acceptable under the recorded policy, and the very verdict promote recorded. A stateful
release serves its STEP model too (`<name>-step@alias`): when the decision names one, that version's file must be
it (`served.step_model`), so that moving the STEP alias to another model fails.
"""

from __future__ import annotations

import hashlib
import posixpath
from pathlib import Path
from typing import Any

from skewgate.common import attest
from skewgate.common import mlflow_conventions as conv
from skewgate.common.errors import InputError
from skewgate.common.io import read_regular_file, sha256_file
from skewgate.common.policy import GatePolicy
from skewgate.common.registry import Champion, ChampionReader
from skewgate.common.verdict import Check, Subject, Verdict

STEP = "verify"
MLMODEL = "MLmodel"
MAX_MLMODEL_BYTES = 1024 * 1024
# What promote registers: an MLflow Model with exactly these flavours (`mlflow.onnx.save_model`).
FLAVOURS = frozenset({"onnx", "python_function"})
MODEL_SUFFIXES = (".onnx", ".data")  # a model file, or ONNX external data


def verify_champion(*, model_name: str, alias: str, source: ChampionReader, trusted: dict[str, Any],
                    workdir: Path, gates: GatePolicy) -> Verdict:
    """The verdict on `model_name@alias` under verify's own policy `gates`: the signed decision must have required
    at least its steps, and every stored verdict (of those and of every step the decision required) must meet
    its settings bounds and required checks, and pass (`warn` only where both policies allow it)."""
    required = gates.required
    if not trusted:
        raise InputError("--trusted-key", expected="at least one trusted public key", found="none")
    champion = source.fetch(model_name, alias, workdir, attestations=True)
    if champion is None:
        return Verdict.from_checks(STEP, [Check("champion.resolved", passed=False,
                                                detail=f"no version of {model_name!r} holds the alias {alias!r} "
                                                       "(no such registered model, or the alias is unset)")],
                                   subject=None)
    expected = champion.sha256
    checks = [Check("champion.resolved", passed=True, detail=f"{alias} → version {champion.version}"),
              *served_file_checks(champion.files(), expected)]
    subject = Subject(artifact=champion.uri, sha256=expected or "0" * 64)
    if champion.attestations_dir is None:
        checks.append(Check("attestation.promotion", passed=False, detail=champion.attestations_refused or
                            f"no {conv.attestation_uri_tag(alias)} tag: never promoted under {alias!r}"))
        return Verdict.from_checks(STEP, checks, subject=subject)
    promotion, problem = _promotion(champion, trusted, expected, model_name=model_name, alias=alias)
    checks.append(Check("attestation.promotion", passed=not problem, detail=problem or
                        f"signed by a trusted key: pass for {model_name!r} version {champion.version} "
                        f"under alias {alias!r}"))
    if promotion is not None:
        policy = promotion.get("policy", {})
        decided = [str(s) for s in policy.get("required", [])] if isinstance(policy.get("required"), list) else []
        missing = [step for step in required if step not in decided]
        checks.append(Check("policy.required", passed=not missing and bool(decided),
                            detail=f"the decision required {', '.join(decided) or '(nothing)'}"
                            + (f", not {', '.join(missing)}" if missing else "")
                            + f"; asked for {', '.join(required) or '(nothing)'}"))
        # a stateful model's probe judged its STEP model, which the signed decision names (promote's `served`)
        served = named if isinstance(named := promotion.get("served"), dict) else {}
        if served:
            checks.append(_served_step_check(source, model_name=model_name, alias=alias, workdir=workdir,
                                             digests={str(d) for d in served.values()}))
        for step in dict.fromkeys([*decided, *required]):
            checks.append(_step_check(champion.attestations_dir, step, trusted, str(served.get(step, expected)),
                                      policy, gates, promotion.get("evidence", {}).get(step, {})))
    return Verdict.from_checks(STEP, checks, subject=subject)


def _served_step_check(source: ChampionReader, *, model_name: str, alias: str, workdir: Path,
                       digests: set[str]) -> Check:
    """A stateful release serves its STEP model, `<name>-step@alias`, which the signed decision names by digest:
    that version's file must be it, the one file its MLmodel loads, as for the promoted model itself."""
    name = f"{model_name}{conv.STEP_SUFFIX}"
    if len(digests) != 1:
        return Check("served.step_model", passed=False, detail=f"the decision names {len(digests)} served files")
    (digest,) = digests
    step = source.fetch(name, alias, workdir / "step")
    if step is None:
        return Check("served.step_model", passed=False, detail=f"{name} has no alias {alias!r}, but the decision "
                     f"names the STEP model sha256 {digest} as served")
    problems = [f"{c.name}: {c.detail}" for c in served_file_checks(step.files(), digest) if not c.passed]
    return Check("served.step_model", passed=not problems,
                 detail="; ".join(problems) or f"{step.label} serves sha256 {digest}, the STEP model the decision "
                 "names")


def served_file_checks(model_dir: Path, expected: str) -> list[Check]:
    """`model.loads`: what the version's `MLmodel` loads, and that it is one file inside the folder;
    `artifact.sha256`: that file has the gated digest `expected`; `model.files`: no other model file and no
    external data in the folder (what the gated digest does not cover could be served)."""
    loaded, problem = _loaded_file(model_dir)
    checks = [Check("model.loads", passed=not problem, detail=problem or
                    f"MLmodel's onnx and python_function flavours load {loaded}")]
    if loaded is None:
        checks.append(Check("artifact.sha256", passed=False, detail="no file the registered MLmodel loads"))
        return checks
    digest = sha256_file(model_dir / loaded)
    checks.append(Check("artifact.sha256", passed=bool(expected) and digest == expected,
                        detail=f"{loaded} (the file MLmodel loads) has sha256 {digest}"
                        + ("" if digest == expected else f", not the gated {expected or '(no tag)'}")))
    external: set[str] = set()
    if digest == expected:  # parse only the gated bytes: they were checked as ONNX before promotion
        from skewgate.common.mlflow_log import onnx_external_data

        external = {posixpath.normpath(posixpath.join(posixpath.dirname(loaded), location))
                    for location in onnx_external_data(model_dir / loaded)}
    others = sorted(str(p.relative_to(model_dir)) for p in model_dir.rglob("*")
                    if p.name.lower().endswith(MODEL_SUFFIXES) and str(p.relative_to(model_dir)) != loaded)
    problems = ([f"{loaded} references external data {', '.join(sorted(external))}, which no gated digest covers"]
                if external else [])
    unreferenced = [name for name in others if name not in external]
    if unreferenced:
        problems.append(f"other model files beside {loaded}: {', '.join(unreferenced)}")
    checks.append(Check("model.files", passed=not problems,
                        detail="; ".join(problems) or f"{loaded} is the only model file, with no external data"))
    return checks


def _loaded_file(model_dir: Path) -> tuple[str | None, str]:
    """The path (relative, POSIX) of the file the version's `MLmodel` loads, or None and what was found instead.

    `mlflow.onnx.load_model` opens the `onnx` flavour's `data:`; `mlflow.pyfunc.load_model` imports the
    `python_function` flavour's `loader_module` and hands it that flavour's own `data:`, after putting its `code:`
    folders on `sys.path`. So: exactly the two flavours promote writes, `mlflow.onnx` as the loader, one `data:`
    for both, no code, and a regular file inside the folder."""
    from skewgate.common.documents import parse_yaml

    try:
        text = read_regular_file(model_dir / MLMODEL, limit=MAX_MLMODEL_BYTES, expected="an MLmodel file")
        document = parse_yaml(text, source=MLMODEL, expected="an MLmodel file (YAML)")
    except InputError as err:
        return None, str(err)
    flavors = document.get("flavors") if isinstance(document, dict) else None
    if not isinstance(flavors, dict):
        return None, f"{MLMODEL} has no flavours"
    if set(flavors) != FLAVOURS or not all(isinstance(flavors[f], dict) for f in FLAVOURS):
        return None, f"{MLMODEL} has flavours {sorted(map(str, flavors))}, not {sorted(FLAVOURS)}"
    onnx_flavour, pyfunc = flavors["onnx"], flavors["python_function"]
    data = onnx_flavour.get("data")
    problems = []
    if pyfunc.get("loader_module") != "mlflow.onnx":
        problems.append(f"python_function loads through {pyfunc.get('loader_module')!r}, not 'mlflow.onnx'")
    if pyfunc.get("data") != data:
        problems.append(f"python_function loads data {pyfunc.get('data')!r}, the onnx flavour {data!r}")
    for name, flavour in (("onnx", onnx_flavour), ("python_function", pyfunc)):
        if flavour.get("code"):
            problems.append(f"the {name} flavour puts code {flavour.get('code')!r} on the import path")
    if not isinstance(data, str) or not data:
        problems.append(f"the onnx flavour's data is {data!r}, not a file name")
    elif data.startswith(("/", "\\")) or ".." in data.replace("\\", "/").split("/"):
        problems.append(f"the onnx flavour's data {data!r} is outside the model folder")
    else:
        path = model_dir / data
        if path.is_symlink() or not path.resolve().is_relative_to(model_dir.resolve()):
            problems.append(f"the onnx flavour's data {data!r} is a symbolic link or leads outside the model folder")
        elif not path.is_file():
            problems.append(f"the onnx flavour's data {data!r} is not a file in the model folder")
    if problems:
        return None, f"{MLMODEL}: " + "; ".join(problems)
    assert isinstance(data, str)
    return posixpath.normpath(data), ""


def _promotion(champion: Champion, trusted: dict[str, Any], sha: str, *, model_name: str,
               alias: str) -> tuple[dict[str, Any] | None, str]:
    assert champion.attestations_dir is not None
    try:
        envelope = attest.read_envelope(champion.attestations_dir / f"promotion{attest.ENVELOPE_SUFFIX}")
        statement, _ = attest.open_envelope(envelope, trusted)
    except (InputError, attest.SignatureInvalid) as err:  # InputError: not a regular file, or too large
        return None, f"promotion attestation: {err}"
    predicate = statement.get("predicate", {})
    digest = (statement.get("subject") or [{}])[0].get("digest", {}).get("sha256")
    if statement.get("predicateType") != attest.PROMOTION_PREDICATE:
        return None, f"predicateType {statement.get('predicateType')!r}"
    if not isinstance(predicate, dict):
        return None, "the signed decision has no predicate"
    if digest != sha or predicate.get("version") != champion.version or predicate.get("decision") != "pass":
        return None, (f"the signed decision is {predicate.get('decision')!r} for version {predicate.get('version')} "
                      f"sha256 {digest}, not pass for version {champion.version} sha256 {sha}")
    if predicate.get("model_name") != model_name or predicate.get("alias") != alias:
        return None, (f"the signed decision promoted {predicate.get('model_name')!r} version "
                      f"{predicate.get('version')} under alias {predicate.get('alias')!r}, not {model_name!r} "
                      f"under alias {alias!r}")
    return predicate, ""


def _step_check(folder: Path, step: str, trusted: dict[str, Any], sha: str, policy: dict[str, Any],
                gates: GatePolicy, recorded: dict[str, Any]) -> Check:
    name = f"evidence.{step}"
    try:
        verdict, content = Verdict.read_with_bytes(folder / f"{step}.json")
        envelope = attest.read_envelope(folder / f"{step}{attest.ENVELOPE_SUFFIX}")
        attest.verify_verdict(verdict, envelope, trusted, artifact_sha256=sha)
    except (InputError, attest.SignatureInvalid) as err:
        return Check(name, passed=False, detail=str(err))
    if verdict.step != step:
        return Check(name, passed=False, detail=f"the stored {step}.json is a {verdict.step!r} verdict")
    accepted = {"pass", "warn"} if policy.get("allow_warn") is True and gates.allow_warn else {"pass"}
    if verdict.status not in accepted:
        return Check(name, passed=False, detail=f"status {verdict.status}")
    problems = gates.problems(verdict)
    if problems:
        return Check(name, passed=False, detail=f"refused by the policy ({gates.source}): {'; '.join(problems)}")
    if hashlib.sha256(content).hexdigest() != recorded.get("verdict_sha256"):
        return Check(name, passed=False, detail="not the verdict promote's signed decision recorded")
    return Check(name, passed=True, detail=f"{verdict.status}, signed, same artifact")
